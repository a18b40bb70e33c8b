package xds

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/model"
)

// Source is the model's XDS source: istiod's workloads and services (WDS,
// istio.workload.Address) feed the model, its authorization policies
// (istio.security.Authorization) the policy store. It implements
// model.Source.
type Source struct {
	cfg      Config
	policies PolicySink
	cluster  string
	// client is the last Run's, for Stats (tests).
	client atomicClient
}

// NewSource returns a Source of istiod at cfg.Address that feeds policies
// too; cluster names the one service view the model gets (the proxy's own
// cluster: istiod has merged the others into it). cfg.Types is set here.
func NewSource(cfg Config, policies PolicySink, cluster string) (*Source, error) {
	if policies == nil {
		return nil, fmt.Errorf("istiod XDS: no policy store for %s", AuthorizationType)
	}
	cfg.Types = []string{AddressType, AuthorizationType}
	c, err := NewClient(cfg, nil, nil) // validate now, not in the proxy's retry loop
	if err != nil {
		return nil, err
	}
	_ = c.Close()
	return &Source{cfg: cfg, policies: policies, cluster: cluster}, nil
}

// Run feeds sink (and the policy store) until ctx ends; the model is
// marked synced once both types' first responses are applied and ACKed.
func (s *Source) Run(ctx context.Context, sink model.Sink) error {
	st := newState(sink, s.policies, s.cluster)
	c, err := NewClient(s.cfg, handlerFunc(st.handle), sink.MarkSynced)
	if err != nil {
		return err
	}
	defer c.Close()
	s.client.Store(c)
	return c.Run(ctx)
}

// Stats are the current client's counters.
func (s *Source) Stats() Stats {
	if c := s.client.Load(); c != nil {
		return c.Stats()
	}
	return Stats{}
}

type handlerFunc func(typeURL string, resources []Resource, removed []string) []Reject

func (f handlerFunc) Handle(typeURL string, resources []Resource, removed []string) []Reject {
	return f(typeURL, resources, removed)
}

// NodeInfo is what ztunnel tells istiod about itself.
type NodeInfo struct {
	// IP is the proxy pod's IP (INSTANCE_IP; ztunnel's default 1.1.1.1).
	IP string
	// PodName and Namespace are the proxy pod's: istiod requires the
	// namespace to be its token's (the node ID's config namespace).
	PodName, Namespace string
	NodeName           string
	// Metadata is added to the node metadata: ztunnel's proxy metadata,
	// CLUSTER_ID among them.
	Metadata map[string]string
	// JSONMetadata are values given as JSON (ISTIO_METAJSON_*).
	JSONMetadata map[string]any
}

// Node is the node ztunnel sends: ID ztunnel~IP~POD.NS~NS.svc.cluster.local
// (istiod reads the proxy type, ztunnel, and its namespace from it) and
// metadata NAME, NAMESPACE, INSTANCE_IPS, NODE_NAME and the rest.
func (n NodeInfo) Node() (Node, error) {
	ip := n.IP
	if ip == "" {
		ip = "1.1.1.1"
	}
	fields := map[string]any{"NAME": n.PodName, "NAMESPACE": n.Namespace, "INSTANCE_IPS": ip, "NODE_NAME": n.NodeName}
	for k, v := range n.Metadata {
		fields[k] = v
	}
	for k, v := range n.JSONMetadata {
		fields[k] = v
	}
	md, err := structpb.NewStruct(fields)
	if err != nil {
		return Node{}, fmt.Errorf("node metadata: %w", err)
	}
	return Node{
		ID:       fmt.Sprintf("ztunnel~%s~%s.%s~%s.svc.cluster.local", ip, n.PodName, n.Namespace, n.Namespace),
		Metadata: md,
	}, nil
}

// NodeInfoFromEnv reads the environment as ztunnel does: INSTANCE_IP,
// POD_NAME, POD_NAMESPACE, NODE_NAME, ISTIO_META_* (prefix stripped) and
// ISTIO_METAJSON_* (JSON values); CLUSTER_ID defaults to clusterID.
func NodeInfoFromEnv(clusterID string) (NodeInfo, error) {
	n := NodeInfo{
		IP: os.Getenv("INSTANCE_IP"), PodName: os.Getenv("POD_NAME"),
		Namespace: os.Getenv("POD_NAMESPACE"), NodeName: os.Getenv("NODE_NAME"),
		Metadata: map[string]string{}, JSONMetadata: map[string]any{},
	}
	if clusterID != "" {
		n.Metadata["CLUSTER_ID"] = clusterID
	}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if key, ok := strings.CutPrefix(k, "ISTIO_METAJSON_"); ok {
			var val any
			if err := json.Unmarshal([]byte(v), &val); err != nil {
				return NodeInfo{}, fmt.Errorf("environment variable %s: %w", k, err)
			}
			n.JSONMetadata[key] = val
		} else if key, ok := strings.CutPrefix(k, "ISTIO_META_"); ok {
			n.Metadata[key] = v
		}
	}
	return n, nil
}
