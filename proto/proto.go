// Package proto holds the .proto files of the gRPC services idemops publishes, for clients to
// generate code from (or to read: the servers also answer reflection), and embeds them so that
// the servers build their descriptors from the very files published here.
//
// idemops/demo/v1/payments.proto is the demo payments service (package demo serves it).
package proto

import "embed"

// Files holds every .proto file under this folder, by its import path
// ("idemops/demo/v1/payments.proto").
//
//go:embed idemops
var Files embed.FS
