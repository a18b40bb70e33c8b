package istioca

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Field numbers of ca.proto.
const (
	fieldCSR              protowire.Number = 1
	fieldValidityDuration protowire.Number = 3
	fieldMetadata         protowire.Number = 4
	fieldCertChain        protowire.Number = 1
)

// request is IstioCertificateRequest.
type request struct {
	CSR              string
	ValidityDuration int64 // seconds
	Metadata         *structpb.Struct
}

func (r *request) marshal() ([]byte, error) {
	var b []byte
	if r.CSR != "" {
		b = protowire.AppendTag(b, fieldCSR, protowire.BytesType)
		b = protowire.AppendString(b, r.CSR)
	}
	if r.ValidityDuration != 0 {
		b = protowire.AppendTag(b, fieldValidityDuration, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(r.ValidityDuration))
	}
	if r.Metadata != nil {
		m, err := proto.MarshalOptions{Deterministic: true}.Marshal(r.Metadata)
		if err != nil {
			return nil, fmt.Errorf("encoding request metadata: %w", err)
		}
		b = protowire.AppendTag(b, fieldMetadata, protowire.BytesType)
		b = protowire.AppendBytes(b, m)
	}
	return b, nil
}

// unmarshalRequest is the server side's decoder, for tests.
func unmarshalRequest(b []byte) (*request, error) {
	r := &request{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == fieldCSR && typ == protowire.BytesType:
			v, n := protowire.ConsumeString(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			r.CSR, b = v, b[n:]
		case num == fieldValidityDuration && typ == protowire.VarintType:
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			r.ValidityDuration, b = int64(v), b[n:]
		case num == fieldMetadata && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			r.Metadata = &structpb.Struct{}
			if err := proto.Unmarshal(v, r.Metadata); err != nil {
				return nil, fmt.Errorf("metadata: %w", err)
			}
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil, protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	return r, nil
}

// unmarshalResponse decodes IstioCertificateResponse into its cert_chain;
// unknown fields are skipped, as any proto3 decoder does.
func unmarshalResponse(b []byte) ([]string, error) {
	var chain []string
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("decoding IstioCertificateResponse: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == fieldCertChain && typ == protowire.BytesType {
			v, n := protowire.ConsumeString(b)
			if n < 0 {
				return nil, fmt.Errorf("decoding IstioCertificateResponse.cert_chain: %w", protowire.ParseError(n))
			}
			if !utf8.ValidString(v) {
				return nil, errors.New("decoding IstioCertificateResponse.cert_chain: invalid UTF-8")
			}
			chain, b = append(chain, v), b[n:]
			continue
		}
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil, fmt.Errorf("decoding IstioCertificateResponse: %w", protowire.ParseError(n))
		}
		b = b[n:]
	}
	return chain, nil
}

func marshalResponse(chain []string) []byte {
	var b []byte
	for _, c := range chain {
		b = protowire.AppendTag(b, fieldCertChain, protowire.BytesType)
		b = protowire.AppendString(b, c)
	}
	return b
}
