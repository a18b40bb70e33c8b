package zds

import (
	"bytes"
	"errors"
	"testing"
)

// The golden bytes are written by hand from zds.proto's field numbers, so a
// renumbering in wire.go fails here rather than against a real ztunnel.
func TestMarshalMatchesZdsProto(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		got  []byte
		want []byte
	}{
		{"hello V1", marshalHello(), []byte{0x08, 0x01}},
		{"ack ok", marshalAck(""), []byte{0x0a, 0x00}},
		{"ack error", marshalAck("x"), []byte{0x0a, 0x03, 0x0a, 0x01, 'x'}},
		{"snapshot sent", marshalRequest(request{kind: KindSnapshotSent}), []byte{0x1a, 0x00}},
		{"keep uid=1 in field 5", marshalRequest(request{kind: KindKeep, uid: "u"}), []byte{0x2a, 0x03, 0x0a, 0x01, 'u'}},
		{"del uid=2 in field 2", marshalRequest(request{kind: KindDel, uid: "u"}), []byte{0x12, 0x03, 0x12, 0x01, 'u'}},
		{
			"add uid=1 info=2{name=1 namespace=2 sa=3} in field 1",
			marshalRequest(request{kind: KindAdd, uid: "u", info: WorkloadInfo{Name: "n", Namespace: "s", ServiceAccount: "a"}}),
			[]byte{0x0a, 0x0e, 0x0a, 0x01, 'u', 0x12, 0x09, 0x0a, 0x01, 'n', 0x12, 0x01, 's', 0x1a, 0x01, 'a'},
		},
	}
	for _, c := range cases {
		if !bytes.Equal(c.got, c.want) {
			t.Errorf("%s: got % x, want % x", c.name, c.got, c.want)
		}
	}
}

func TestUnmarshalRequest(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		in      []byte
		want    request
		wantErr bool
	}{
		{name: "add", in: marshalRequest(request{kind: KindAdd, uid: "p1", info: WorkloadInfo{"a", "b", "c"}}),
			want: request{kind: KindAdd, uid: "p1", info: WorkloadInfo{"a", "b", "c"}}},
		{name: "unknown fields skipped", in: append([]byte{0x78, 0x05, 0x32, 0x01, 'z'}, marshalRequest(request{kind: KindDel, uid: "d"})...),
			want: request{kind: KindDel, uid: "d"}},
		{name: "trust_domain field 4 of WorkloadInfo is ignored",
			in:   []byte{0x0a, 0x08, 0x0a, 0x01, 'u', 0x12, 0x03, 0x22, 0x01, 't'},
			want: request{kind: KindAdd, uid: "u"}},
		{name: "empty", in: nil, wantErr: true},
		{name: "truncated", in: []byte{0x0a, 0x05, 0x0a}, wantErr: true},
		{name: "add as varint", in: []byte{0x08, 0x01}, wantErr: true},
		{name: "uid as varint", in: []byte{0x12, 0x02, 0x10, 0x01}, wantErr: true},
		{name: "bad tag", in: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, wantErr: true},
	}
	for _, c := range cases {
		got, err := unmarshalRequest(c.in)
		if c.wantErr {
			if !errors.Is(err, errMalformed) {
				t.Errorf("%s: err = %v, want errMalformed", c.name, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s: got %+v, %v; want %+v", c.name, got, err, c.want)
		}
	}
}

func TestUnmarshalAckAndHello(t *testing.T) {
	t.Parallel()
	if msg, err := unmarshalAck(marshalAck("boom")); err != nil || msg != "boom" {
		t.Errorf("ack round trip: %q, %v", msg, err)
	}
	if _, err := unmarshalAck([]byte{0x08, 0x01}); !errors.Is(err, errMalformed) {
		t.Errorf("response without ack: err = %v, want errMalformed", err)
	}
	if v, err := unmarshalHello(marshalHello()); err != nil || v != versionV1 {
		t.Errorf("hello round trip: %d, %v", v, err)
	}
	if _, err := unmarshalHello([]byte{0x0a, 0x00}); !errors.Is(err, errMalformed) {
		t.Errorf("hello with bytes version: err = %v, want errMalformed", err)
	}
}

// FuzzUnmarshalRequest checks the decoder never panics and that whatever it
// accepts survives a marshal/unmarshal round trip unchanged.
func FuzzUnmarshalRequest(f *testing.F) {
	for _, r := range []request{
		{kind: KindAdd, uid: "uid-1", info: WorkloadInfo{"pod", "ns", "sa"}},
		{kind: KindKeep, uid: "uid-2"},
		{kind: KindDel, uid: "uid-3"},
		{kind: KindSnapshotSent},
	} {
		f.Add(marshalRequest(r))
	}
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x80, 0x80, 0x80, 0x80, 0x10})
	f.Add(marshalAck("x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := unmarshalRequest(b)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error not marked malformed: %v", err)
			}
			return
		}
		again, err := unmarshalRequest(marshalRequest(r))
		if err != nil || again != r {
			t.Fatalf("round trip: %+v -> %+v, %v", r, again, err)
		}
	})
}

func FuzzUnmarshalAck(f *testing.F) {
	f.Add(marshalAck(""))
	f.Add(marshalAck("refused"))
	f.Add([]byte{0x0a, 0x02, 0x08})
	f.Fuzz(func(t *testing.T, b []byte) {
		msg, err := unmarshalAck(b)
		if err != nil {
			return
		}
		if again, err := unmarshalAck(marshalAck(msg)); err != nil || again != msg {
			t.Fatalf("round trip: %q -> %q, %v", msg, again, err)
		}
	})
}
