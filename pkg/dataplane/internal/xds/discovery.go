package xds

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// The resource types ztunnel subscribes to.
const (
	AddressType       = "type.googleapis.com/istio.workload.Address"
	AuthorizationType = "type.googleapis.com/istio.security.Authorization"
)

// Method is the full gRPC method name of delta ADS.
const Method = "/envoy.service.discovery.v3.AggregatedDiscoveryService/DeltaAggregatedResources"

// Node is envoy.config.core.v3.Node as ztunnel fills it.
type Node struct {
	ID       string
	Metadata *structpb.Struct
}

func (n *Node) marshal() ([]byte, error) {
	b := appendString(nil, 1, n.ID)
	if n.Metadata != nil {
		m, err := proto.MarshalOptions{Deterministic: true}.Marshal(n.Metadata)
		if err != nil {
			return nil, fmt.Errorf("encoding node metadata: %w", err)
		}
		b = appendBytes(b, 3, m)
	}
	return b, nil
}

// deltaRequest is DeltaDiscoveryRequest.
type deltaRequest struct {
	Node                    *Node
	TypeURL                 string
	Subscribe               []string
	Unsubscribe             []string
	InitialResourceVersions map[string]string
	ResponseNonce           string
	// ErrorDetail non-empty makes the request a NACK (google.rpc.Status's
	// message; ztunnel leaves the code 0).
	ErrorDetail string
}

func (r *deltaRequest) marshal() ([]byte, error) {
	var b []byte
	if r.Node != nil {
		n, err := r.Node.marshal()
		if err != nil {
			return nil, err
		}
		b = appendBytes(b, 1, n)
	}
	b = appendString(b, 2, r.TypeURL)
	for _, s := range r.Subscribe {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, s)
	}
	for _, s := range r.Unsubscribe {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendString(b, s)
	}
	// Sorted, so that a request encodes the same every time.
	for _, k := range slices.Sorted(maps.Keys(r.InitialResourceVersions)) {
		e := protowire.AppendTag(nil, 1, protowire.BytesType)
		e = protowire.AppendString(e, k)
		e = appendString(e, 2, r.InitialResourceVersions[k])
		b = appendBytes(b, 5, e)
	}
	b = appendString(b, 6, r.ResponseNonce)
	if r.ErrorDetail != "" {
		b = appendBytes(b, 7, appendString(nil, 2, r.ErrorDetail))
	}
	return b, nil
}

// Resource is one resource of a DeltaDiscoveryResponse, its Any unwrapped.
type Resource struct {
	Name    string
	Version string
	// TypeURL and Value are the google.protobuf.Any's.
	TypeURL string
	Value   []byte
}

// deltaResponse is DeltaDiscoveryResponse.
type deltaResponse struct {
	TypeURL   string
	Nonce     string
	Resources []Resource
	Removed   []string
}

func unmarshalDeltaResponse(b []byte) (*deltaResponse, error) {
	r := &deltaResponse{}
	err := walk(b, func(f field) error {
		var err error
		switch f.num {
		case 2:
			var m []byte
			if m, err = f.msg(); err == nil {
				var res Resource
				res, err = unmarshalResource(m)
				r.Resources = append(r.Resources, res)
			}
		case 4:
			r.TypeURL, err = f.str()
		case 5:
			r.Nonce, err = f.str()
		case 6:
			var s string
			s, err = f.str()
			r.Removed = append(r.Removed, s)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("decoding DeltaDiscoveryResponse: %w", err)
	}
	return r, nil
}

func unmarshalResource(b []byte) (Resource, error) {
	var r Resource
	err := walk(b, func(f field) error {
		var err error
		switch f.num {
		case 1:
			r.Version, err = f.str()
		case 2:
			var m []byte
			if m, err = f.msg(); err == nil {
				err = walk(m, func(f field) error {
					var err error
					switch f.num {
					case 1:
						r.TypeURL, err = f.str()
					case 2:
						r.Value, err = f.msg()
					}
					return err
				})
			}
		case 3:
			r.Name, err = f.str()
		}
		return err
	})
	if err != nil {
		return r, fmt.Errorf("resource %q: %w", r.Name, err)
	}
	return r, nil
}
