// Package keys is the operator side of the keys table: what the console, the daemon and the
// CLI read of it (search, find by key, counts, names, a bulk replay's selection) under a tenant
// scope, and an administrator's transitions of a stuck or held key (MarkFinal,
// ReleaseForRetry). Services never import it; they import claim. claim and keys are the only
// writers of the table, and a replay still goes through claim's takeover and drive, downstream
// first.
package keys
