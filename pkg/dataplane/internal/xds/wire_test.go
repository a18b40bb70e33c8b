package xds

import (
	"net/netip"
	"reflect"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Encoders of what istiod sends and a decoder of what ztunnel sends, for the
// fake server; the interop test in bench/ checks them against Istio's own
// generated types.

func msg(b []byte, num protowire.Number, m []byte) []byte { return appendBytes(b, num, m) }

func str(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

type testWorkload struct {
	uid, name, ns, sa, network, node, cluster string
	ips                                       []string
	hbone, unhealthy                          bool
	services                                  map[string][][2]uint32
	policies                                  []string
	rawAddr                                   []byte // an address of the wrong length
}

func (w testWorkload) encode() []byte {
	var b []byte
	b = str(b, wlUID, w.uid)
	b = str(b, wlName, w.name)
	b = str(b, wlNamespace, w.ns)
	for _, ip := range w.ips {
		b = appendBytes(b, wlAddresses, netip.MustParseAddr(ip).AsSlice())
	}
	if w.rawAddr != nil {
		b = appendBytes(b, wlAddresses, w.rawAddr)
	}
	b = appendString(b, wlNetwork, w.network)
	if w.hbone {
		b = appendVarint(b, wlTunnel, tunnelHBONE)
	}
	b = appendString(b, wlServiceAccount, w.sa)
	b = appendString(b, wlNode, w.node)
	for host, ports := range w.services {
		var pl []byte
		for _, p := range ports {
			pl = msg(pl, 1, appendVarint(appendVarint(nil, 1, uint64(p[0])), 2, uint64(p[1])))
		}
		b = msg(b, wlServices, msg(str(nil, 1, host), 2, pl))
	}
	for _, p := range w.policies {
		b = str(b, wlAuthzPolicies, p)
	}
	if w.unhealthy {
		b = appendVarint(b, wlStatus, 1)
	}
	b = appendString(b, wlClusterID, w.cluster)
	return msg(nil, addressWorkload, b)
}

type testService struct {
	name, ns, host, network string
	vips                    []string
	ports                   [][2]uint32
}

func (s testService) encode() []byte {
	var b []byte
	b = str(b, svcName, s.name)
	b = str(b, svcNamespace, s.ns)
	b = str(b, svcHostname, s.host)
	for _, v := range s.vips {
		b = msg(b, svcAddresses, appendBytes(appendString(nil, 1, s.network), 2, netip.MustParseAddr(v).AsSlice()))
	}
	for _, p := range s.ports {
		b = msg(b, svcPorts, appendVarint(appendVarint(nil, 1, uint64(p[0])), 2, uint64(p[1])))
	}
	return msg(nil, addressService, b)
}

// authz encodes an Authorization with one rule of one clause of matches.
func authz(name, ns string, scope, action uint64, matches ...[]byte) []byte {
	var b []byte
	b = str(b, 1, name)
	b = str(b, 2, ns)
	b = appendVarint(b, 3, scope)
	b = appendVarint(b, 4, action)
	var clause []byte
	for _, m := range matches {
		clause = msg(clause, 2, m)
	}
	return msg(b, 5, msg(nil, 1, clause))
}

func principalMatch(exact string) []byte { return msg(nil, 3, str(nil, 1, exact)) }

func portsMatch(ports ...uint64) []byte {
	var packed []byte
	for _, p := range ports {
		packed = protowire.AppendVarint(packed, p)
	}
	return msg(nil, 9, packed)
}

func anyMsg(typeURL string, v []byte) []byte { return msg(str(nil, 1, typeURL), 2, v) }

func resource(name, version, typeURL string, v []byte) []byte {
	b := appendString(nil, 1, version)
	b = msg(b, 2, anyMsg(typeURL, v))
	return str(b, 3, name)
}

func encodeResponse(typeURL, nonce string, resources [][]byte, removed ...string) []byte {
	var b []byte
	for _, r := range resources {
		b = msg(b, 2, r)
	}
	b = str(b, 4, typeURL)
	b = str(b, 5, nonce)
	for _, r := range removed {
		b = str(b, 6, r)
	}
	return b
}

// gotRequest is a decoded DeltaDiscoveryRequest.
type gotRequest struct {
	NodeID      string
	Metadata    map[string]any
	TypeURL     string
	Subscribe   []string
	Versions    map[string]string
	Nonce       string
	ErrorDetail string
}

func decodeRequest(b []byte) (*gotRequest, error) {
	r := &gotRequest{Versions: map[string]string{}}
	err := walk(b, func(f field) error {
		switch f.num {
		case 1:
			return walk(f.bytes, func(f field) error {
				switch f.num {
				case 1:
					r.NodeID = string(f.bytes)
				case 3:
					var s structpb.Struct
					if err := proto.Unmarshal(f.bytes, &s); err != nil {
						return err
					}
					r.Metadata = s.AsMap()
				}
				return nil
			})
		case 2:
			r.TypeURL = string(f.bytes)
		case 3:
			r.Subscribe = append(r.Subscribe, string(f.bytes))
		case 5:
			var k, v string
			err := walk(f.bytes, func(f field) error {
				if f.num == 1 {
					k = string(f.bytes)
				} else if f.num == 2 {
					v = string(f.bytes)
				}
				return nil
			})
			r.Versions[k] = v
			return err
		case 6:
			r.Nonce = string(f.bytes)
		case 7:
			return walk(f.bytes, func(f field) error {
				if f.num == 2 {
					r.ErrorDetail = string(f.bytes)
				}
				return nil
			})
		}
		return nil
	})
	return r, err
}

func reflectEqual(a, b any) bool { return reflect.DeepEqual(a, b) }
