// Package rawgrpc carries hand-encoded protobuf messages through grpc-go:
// the dataplane's istiod clients (the CA client, the XDS client) encode
// their few messages with protowire instead of linking generated Istio and
// Envoy types, and grpc-go's default codec accepts only those.
package rawgrpc

import "fmt"

// Frame is one encoded message.
type Frame struct{ B []byte }

// Codec passes Frames through. Its name is "proto", so a call's
// content-type is application/grpc+proto as with generated code.
type Codec struct{}

// Name is the codec's content-subtype.
func (Codec) Name() string { return "proto" }

// Marshal returns a Frame's bytes.
func (Codec) Marshal(v any) ([]byte, error) {
	f, ok := v.(*Frame)
	if !ok {
		return nil, fmt.Errorf("rawgrpc codec: cannot marshal %T", v)
	}
	return f.B, nil
}

// Unmarshal copies data into a Frame: grpc-go may reuse its buffer.
func (Codec) Unmarshal(data []byte, v any) error {
	f, ok := v.(*Frame)
	if !ok {
		return fmt.Errorf("rawgrpc codec: cannot unmarshal into %T", v)
	}
	f.B = append([]byte(nil), data...)
	return nil
}
