package xds

import (
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// field is one decoded field of a message: bytes for length-delimited
// fields, varint for varints; fixed-width fields are skipped by walk's
// callers (no message here has any).
type field struct {
	num    protowire.Number
	typ    protowire.Type
	bytes  []byte
	varint uint64
}

// walk calls fn for each field of the encoded message b, in order. Unknown
// fields reach fn too, which ignores them, as any proto3 decoder does.
func walk(b []byte, fn func(f field) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		f := field{num: num, typ: typ}
		switch typ {
		case protowire.BytesType:
			f.bytes, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			f.varint, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("field %d: %w", num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}

var errWireType = errors.New("wrong wire type")

// str is a string field's value; proto3 strings must be valid UTF-8.
func (f field) str() (string, error) {
	if f.typ != protowire.BytesType {
		return "", fmt.Errorf("field %d: %w", f.num, errWireType)
	}
	if !utf8.Valid(f.bytes) {
		return "", fmt.Errorf("field %d: invalid UTF-8", f.num)
	}
	return string(f.bytes), nil
}

// msg is an embedded message's or a bytes field's encoding.
func (f field) msg() ([]byte, error) {
	if f.typ != protowire.BytesType {
		return nil, fmt.Errorf("field %d: %w", f.num, errWireType)
	}
	return f.bytes, nil
}

// uint is a varint field (bool, enum, uint32, int32) as a number.
func (f field) uint() (uint64, error) {
	if f.typ != protowire.VarintType {
		return 0, fmt.Errorf("field %d: %w", f.num, errWireType)
	}
	return f.varint, nil
}

// uint32s appends a repeated uint32 field, packed (proto3's default) or not.
func (f field) uint32s(to []uint32) ([]uint32, error) {
	switch f.typ {
	case protowire.VarintType:
		if f.varint > 1<<32-1 {
			return nil, fmt.Errorf("field %d: %d overflows uint32", f.num, f.varint)
		}
		return append(to, uint32(f.varint)), nil
	case protowire.BytesType:
		b := f.bytes
		for len(b) > 0 {
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return nil, fmt.Errorf("field %d: %w", f.num, protowire.ParseError(n))
			}
			if v > 1<<32-1 {
				return nil, fmt.Errorf("field %d: %d overflows uint32", f.num, v)
			}
			to, b = append(to, uint32(v)), b[n:]
		}
		return to, nil
	}
	return nil, fmt.Errorf("field %d: %w", f.num, errWireType)
}

// Encoding helpers: proto3 leaves zero values out.

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendVarint(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}
