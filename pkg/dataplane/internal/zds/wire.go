package zds

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers exactly as in Istio's zds.proto. They are the wire contract;
// renumbering any of them breaks compatibility with upstream ztunnel.
const (
	fieldHelloVersion = 1

	fieldInfoName           = 1
	fieldInfoNamespace      = 2
	fieldInfoServiceAccount = 3

	fieldAddUID  = 1
	fieldAddInfo = 2
	fieldKeepUID = 1
	fieldDelUID  = 2 // sic: DelWorkload.uid is field 2 upstream

	fieldRequestAdd          = 1
	fieldRequestDel          = 2
	fieldRequestSnapshotSent = 3
	fieldRequestKeep         = 5

	fieldResponseAck = 1
	fieldAckError    = 1
)

// versionV1 is zds.proto's Version.V1, the only version either side speaks.
const versionV1 = 1

// maxMessageSize bounds one packet. Real messages are a few hundred bytes;
// the bound keeps a hostile peer from making us allocate.
const maxMessageSize = 64 << 10

// errMalformed marks every decoding failure, so callers can tell a peer that
// speaks garbage from an I/O error.
var errMalformed = errors.New("malformed zds message")

// WorkloadInfo identifies the pod a workload belongs to; the proxy derives
// the workload's SPIFFE identity from it.
type WorkloadInfo struct {
	Name           string
	Namespace      string
	ServiceAccount string
}

// Kind is the payload of a WorkloadRequest.
type Kind int

// The WorkloadRequest payloads, in the order the protocol introduces them.
const (
	KindAdd Kind = iota + 1
	KindKeep
	KindDel
	KindSnapshotSent
)

func (k Kind) String() string {
	switch k {
	case KindAdd:
		return "AddWorkload"
	case KindKeep:
		return "KeepWorkload"
	case KindDel:
		return "DelWorkload"
	case KindSnapshotSent:
		return "SnapshotSent"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// request is a decoded WorkloadRequest. Info is only meaningful for KindAdd.
type request struct {
	kind Kind
	uid  string
	info WorkloadInfo
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" { // proto3: default values are not encoded
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendMessage(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

func marshalHello() []byte {
	b := protowire.AppendTag(nil, fieldHelloVersion, protowire.VarintType)
	return protowire.AppendVarint(b, versionV1)
}

func marshalAck(errMsg string) []byte {
	return appendMessage(nil, fieldResponseAck, appendString(nil, fieldAckError, errMsg))
}

func marshalRequest(r request) []byte {
	switch r.kind {
	case KindAdd:
		var info []byte
		info = appendString(info, fieldInfoName, r.info.Name)
		info = appendString(info, fieldInfoNamespace, r.info.Namespace)
		info = appendString(info, fieldInfoServiceAccount, r.info.ServiceAccount)
		add := appendString(nil, fieldAddUID, r.uid)
		add = appendMessage(add, fieldAddInfo, info)
		return appendMessage(nil, fieldRequestAdd, add)
	case KindKeep:
		return appendMessage(nil, fieldRequestKeep, appendString(nil, fieldKeepUID, r.uid))
	case KindDel:
		return appendMessage(nil, fieldRequestDel, appendString(nil, fieldDelUID, r.uid))
	case KindSnapshotSent:
		return appendMessage(nil, fieldRequestSnapshotSent, nil)
	}
	panic(fmt.Sprintf("zds: marshal of unknown request kind %d", r.kind))
}

// walk calls fn for each field of a message and fails on anything that is not
// well-formed protobuf. Unknown fields are skipped, as protobuf requires, so a
// newer peer that adds fields still interoperates.
func walk(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%w: bad tag: %w", errMalformed, protowire.ParseError(n))
		}
		b = b[n:]
		var (
			v []byte
			x uint64
		)
		switch typ {
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%w: field %d: %w", errMalformed, num, protowire.ParseError(n))
		}
		b = b[n:]
		if err := fn(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// str decodes a string field, rejecting a wire type that cannot be one.
func str(num protowire.Number, typ protowire.Type, v []byte) (string, error) {
	if typ != protowire.BytesType {
		return "", fmt.Errorf("%w: field %d has wire type %d, want bytes", errMalformed, num, typ)
	}
	return string(v), nil
}

func sub(num protowire.Number, typ protowire.Type) error {
	if typ != protowire.BytesType {
		return fmt.Errorf("%w: field %d has wire type %d, want a message", errMalformed, num, typ)
	}
	return nil
}

func unmarshalHello(b []byte) (version uint64, err error) {
	err = walk(b, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
		if num != fieldHelloVersion {
			return nil
		}
		if typ != protowire.VarintType {
			return fmt.Errorf("%w: ZdsHello.version has wire type %d", errMalformed, typ)
		}
		version = x
		return nil
	})
	return version, err
}

// unmarshalAck decodes a WorkloadResponse. A response without an ack payload
// is malformed: the ack is the only thing a proxy may say after its hello.
func unmarshalAck(b []byte) (errMsg string, err error) {
	seen := false
	err = walk(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != fieldResponseAck {
			return nil
		}
		if err := sub(num, typ); err != nil {
			return err
		}
		seen = true
		return walk(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
			if num != fieldAckError {
				return nil
			}
			s, err := str(num, typ, v)
			errMsg = s
			return err
		})
	})
	if err == nil && !seen {
		err = fmt.Errorf("%w: WorkloadResponse without ack", errMalformed)
	}
	return errMsg, err
}

func unmarshalInfo(b []byte) (WorkloadInfo, error) {
	var info WorkloadInfo
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		var dst *string
		switch num {
		case fieldInfoName:
			dst = &info.Name
		case fieldInfoNamespace:
			dst = &info.Namespace
		case fieldInfoServiceAccount:
			dst = &info.ServiceAccount
		default:
			return nil
		}
		s, err := str(num, typ, v)
		*dst = s
		return err
	})
	return info, err
}

// uidField decodes a message whose only field of interest is a uid string.
func uidField(b []byte, want protowire.Number) (string, error) {
	var uid string
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if num != want {
			return nil
		}
		s, err := str(num, typ, v)
		uid = s
		return err
	})
	return uid, err
}

// unmarshalRequest decodes a WorkloadRequest. As with any proto3 oneof, the
// last payload on the wire wins; a request with no payload is malformed.
func unmarshalRequest(b []byte) (request, error) {
	var r request
	err := walk(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		var kind Kind
		switch num {
		case fieldRequestAdd:
			kind = KindAdd
		case fieldRequestKeep:
			kind = KindKeep
		case fieldRequestDel:
			kind = KindDel
		case fieldRequestSnapshotSent:
			kind = KindSnapshotSent
		default:
			return nil
		}
		if err := sub(num, typ); err != nil {
			return err
		}
		r = request{kind: kind}
		var err error
		switch kind {
		case KindAdd:
			err = walk(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				switch num {
				case fieldAddUID:
					s, err := str(num, typ, v)
					r.uid = s
					return err
				case fieldAddInfo:
					if err := sub(num, typ); err != nil {
						return err
					}
					info, err := unmarshalInfo(v)
					r.info = info
					return err
				}
				return nil
			})
		case KindKeep:
			r.uid, err = uidField(v, fieldKeepUID)
		case KindDel:
			r.uid, err = uidField(v, fieldDelUID)
		case KindSnapshotSent:
			err = walk(v, func(protowire.Number, protowire.Type, []byte, uint64) error { return nil })
		}
		return err
	})
	if err == nil && r.kind == 0 {
		err = fmt.Errorf("%w: WorkloadRequest without payload", errMalformed)
	}
	return r, err
}
