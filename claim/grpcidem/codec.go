package grpcidem

import (
	"bytes"
	"encoding/json"
	"errors"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// JSONCodec is a gRPC codec ("json" content subtype) for services that carry plain Go structs
// instead of protoc-generated messages; protobuf messages go through protojson. Register it with
// encoding.RegisterCodec and call with grpc.CallContentSubtype(JSONCodec{}.Name()).
type JSONCodec struct{}

// Name is the content subtype: application/grpc+json.
func (JSONCodec) Name() string { return "json" }

// Marshal encodes v as JSON.
func (JSONCodec) Marshal(v any) ([]byte, error) {
	if pm, ok := v.(proto.Message); ok {
		return jsonNames.Marshal(pm)
	}
	return json.Marshal(v)
}

// DecodeErrorHolder is implemented by request messages that carry their own decode failure. gRPC
// answers a codec error with Internal before any interceptor runs; JSONCodec instead hands the
// failure to such a message, and the server interceptor answers InvalidArgument.
type DecodeErrorHolder interface {
	SetDecodeError(error)
	DecodeError() error
}

// Unmarshal decodes one JSON value into v; invalid UTF-8 and trailing data are errors (a message
// is bounded by the server's MaxRecvMsgSize). A v that is a DecodeErrorHolder keeps the error.
func (c JSONCodec) Unmarshal(data []byte, v any) error {
	err := c.unmarshal(data, v)
	if h, ok := v.(DecodeErrorHolder); ok && err != nil {
		h.SetDecodeError(err)
		return nil
	}
	return err
}

func (JSONCodec) unmarshal(data []byte, v any) error {
	if !utf8.Valid(data) {
		return errors.New("message is not valid UTF-8")
	}
	if pm, ok := v.(proto.Message); ok {
		return protojson.Unmarshal(data, pm)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the message")
	}
	return nil
}
