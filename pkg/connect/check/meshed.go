package check

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// The meshed mode (WithMeshed): the check's namespace is ambient, every
// cluster has a Service per server (server-<cluster>, its endpoint only in
// that cluster, so a client's own cluster's VIP of server-c2 must reach
// c2), and each probe is judged by what the node proxies saw: the client's
// outbound and the server's inbound must both be HBONE, each naming the
// other's identity. A server on another network is reached the same way,
// by the client's own cluster's VIP of its Service: the client's proxy
// must have sent it through an east-west gateway (double HBONE), and the
// server's proxy received it from one of its network's gateway pods.
const (
	// DataplaneModeLabel puts a namespace in the ambient mesh.
	DataplaneModeLabel = "istio.io/dataplane-mode"
	// ServerServiceAccount and ClientServiceAccount give the check's pods
	// their identities.
	ServerServiceAccount = "meshctl-check-server"
	ClientServiceAccount = "meshctl-check-client"

	proxyNamespace = "istio-system"
	proxySelector  = "app.kubernetes.io/name=meshctl-proxy"
	proxyAdminPort = 15000
	connectionsAPI = "/debug/connections"
	clusterLabel   = "meshctl.io/check-cluster"
	// gatewaySelector finds the east-west gateway's pods (the chart's
	// gateway Deployment, which istio-system/istio-eastwestgateway selects).
	gatewaySelector = "app=istio-eastwestgateway"
)

// Mesh is what the node proxies saw of one probe (meshed mode only).
type Mesh struct {
	// HBONE is true when the client's node proxy tunnelled the call and
	// the server's node proxy received it over HBONE.
	HBONE bool `json:"hbone"`
	// ServerIdentity is the identity the client's proxy required of the
	// server ("" when it accepted any mesh identity); ClientIdentity the
	// one the server's proxy saw on the client's certificate.
	ServerIdentity string `json:"serverIdentity,omitempty"`
	ClientIdentity string `json:"clientIdentity,omitempty"`
	// Gateway is the east-west gateway (ip:port) the client's proxy sent
	// the tunnel to, for a server on another network.
	Gateway string `json:"gateway,omitempty"`
}

// WithMeshed runs the check in an ambient namespace and judges every probe
// by the node proxies' record of it: a call that was not HBONE end to end
// fails.
func WithMeshed(on bool) Option { return func(c *Checker) { c.meshed = on } }

// connRecord is one entry of a node proxy's /debug/connections (package
// dataplane/internal/proxy's connRecord).
type connRecord struct {
	Direction string         `json:"direction"`
	HBONE     bool           `json:"hbone"`
	Pod       string         `json:"pod"`
	Src       netip.AddrPort `json:"src"`
	Dst       netip.AddrPort `json:"dst"`
	Gateway   netip.AddrPort `json:"gateway"`
	Peer      string         `json:"peer"`
	Error     string         `json:"error"`
}

// connReader reads the recent connections of the node proxy on a node, and
// the addresses of a cluster's east-west gateway pods (where tunnels from
// other networks arrive from).
type connReader interface {
	connections(ctx context.Context, r *run, node string) ([]connRecord, error)
	gateways(ctx context.Context, r *run) ([]netip.Addr, error)
}

// endpoint is a check pod as a judge needs it.
type endpoint struct {
	pod  string // namespace/name
	ips  []netip.Addr
	node string
}

// judge fills in p.Mesh from the client's and the server's node proxies'
// logs and fails p when the call was not HBONE both ways, or an identity is
// not the check's. A probe that already failed stays failed.
//
// A PathGateway probe (a server on another network) must also have gone
// through an east-west gateway on the client's side, and arrives at the
// server's proxy from one of gateways (the server's network's gateway
// pods), not from the client: the inner tunnel is the client's, so the
// identity is still the client's. Every client on another network comes
// through the same gateways with the same identity, so the server's side
// of such a probe is any of their tunnels.
func judge(p *Probe, ns string, client, server endpoint, clientLog, serverLog []connRecord, gateways []netip.Addr) {
	m := &Mesh{}
	p.Mesh = m
	viaGateway := p.Path == PathGateway
	var why []string
	dst, err := netip.ParseAddr(p.Address)
	if err != nil {
		why = append(why, fmt.Sprintf("address %q: %v", p.Address, err))
	}
	var out *connRecord
	for i := range clientLog {
		r := &clientLog[i]
		if r.Pod != client.pod || r.Dst.Addr().Unmap() != dst || r.Dst.Port() != Port || !strings.HasPrefix(r.Direction, "outbound") || !slices.Contains(client.ips, r.Src.Addr().Unmap()) {
			continue
		}
		if !r.HBONE {
			out = r
			break // one plaintext attempt is enough to fail
		}
		if out == nil || out.Error != "" {
			out = r
		}
	}
	switch {
	case out == nil:
		why = append(why, fmt.Sprintf("the client's node proxy (node %s) saw no connection to %s: the call bypassed the mesh", client.node, p.Address))
	case !out.HBONE:
		why = append(why, fmt.Sprintf("went in plaintext: %s on the client's node proxy (node %s)", out.Direction, client.node))
	case out.Error != "":
		why = append(why, fmt.Sprintf("the client's tunnel failed: %s", out.Error))
	default:
		m.ServerIdentity = out.Peer
		if out.Gateway.IsValid() {
			m.Gateway = out.Gateway.String()
		}
		if viaGateway && !out.Gateway.IsValid() {
			why = append(why, fmt.Sprintf("the client's node proxy (node %s) tunnelled it through no east-west gateway, to a server on another network", client.node))
		}
		// Through a gateway the proxy names every identity the
		// service's endpoints may prove: each must be the server's.
		for _, id := range strings.Split(out.Peer, ",") {
			if id != "" && !strings.HasSuffix(id, "/ns/"+ns+"/sa/"+ServerServiceAccount) {
				why = append(why, fmt.Sprintf("the client's proxy required identity %s, not the server's", out.Peer))
				break
			}
		}
	}
	from, fromWhat := client.ips, "the client"
	if viaGateway {
		from, fromWhat = gateways, "the client through its east-west gateway"
		if len(gateways) == 0 {
			fromWhat += " (no gateway pod found in istio-system with " + gatewaySelector + ")"
		}
	}
	var in *connRecord
	for i := range serverLog {
		r := &serverLog[i]
		if r.Pod != server.pod || r.Dst.Port() != Port || !strings.HasPrefix(r.Direction, "inbound") || !slices.Contains(from, r.Src.Addr().Unmap()) {
			continue
		}
		if !r.HBONE {
			in = r
			break
		}
		if in == nil || in.Error != "" {
			in = r
		}
	}
	switch {
	case in == nil:
		why = append(why, fmt.Sprintf("the server's node proxy (node %s) saw no connection from %s", server.node, fromWhat))
	case !in.HBONE:
		why = append(why, fmt.Sprintf("went in plaintext: %s on the server's node proxy (node %s)", in.Direction, server.node))
	case in.Error != "":
		why = append(why, fmt.Sprintf("the server's proxy refused the tunnel: %s", in.Error))
	default:
		m.ClientIdentity = in.Peer
		if !strings.HasSuffix(in.Peer, "/ns/"+ns+"/sa/"+ClientServiceAccount) {
			why = append(why, fmt.Sprintf("the server's proxy saw identity %q, not the client's", in.Peer))
		}
	}
	m.HBONE = out != nil && out.HBONE && out.Error == "" && in != nil && in.HBONE && in.Error == ""
	if len(why) == 0 {
		return
	}
	msg := strings.Join(why, "; ")
	if p.Status == StatusFailed {
		p.Error += "; " + msg
		return
	}
	p.Status, p.Error = StatusFailed, msg
}

// judgeAll reads every node proxy a probe went through, once, and judges
// the probes of every client.
func (c *Checker) judgeAll(ctx context.Context, runs []*run, probes []Probe) error {
	byName := map[string]*run{}
	for _, r := range runs {
		byName[r.plan.Name] = r
	}
	type key struct{ cluster, node string }
	logs := map[key][]connRecord{}
	read := func(r *run, node string) ([]connRecord, error) {
		k := key{r.plan.Name, node}
		if l, ok := logs[k]; ok {
			return l, nil
		}
		l, err := c.reader.connections(ctx, r, node)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: node proxy on %s: %w", r.plan.Name, node, err)
		}
		logs[k] = l
		return l, nil
	}
	gws := map[string][]netip.Addr{}
	gateways := func(r *run) ([]netip.Addr, error) {
		if g, ok := gws[r.plan.Name]; ok {
			return g, nil
		}
		g, err := c.reader.gateways(ctx, r)
		if err != nil {
			return nil, fmt.Errorf("cluster %q: east-west gateway: %w", r.plan.Name, err)
		}
		gws[r.plan.Name] = g
		return g, nil
	}
	for i := range probes {
		p := &probes[i]
		from, to := byName[p.From], byName[p.To]
		if from == nil || to == nil || untested(p) || p.Path == PathAPI {
			continue
		}
		var gw []netip.Addr
		if p.Path == PathGateway {
			var err error
			if gw, err = gateways(to); err != nil {
				return err
			}
		}
		clientLog, err := read(from, from.clientPod.node)
		if err != nil {
			return err
		}
		serverLog, err := read(to, to.server.node)
		if err != nil {
			return err
		}
		judge(p, c.namespace, from.clientPod, to.server, clientLog, serverLog, gw)
	}
	return nil
}

// serviceName is the meshed mode's Service for the server of a cluster.
func serviceName(cluster string) string { return serverName + "-" + strings.ToLower(cluster) }

// portForwardReader reads /debug/connections from a node proxy's
// localhost admin port through the API server (pods/portforward): the port
// is not on the network, and the proxy's image has no shell.
type portForwardReader struct{}

func (portForwardReader) connections(ctx context.Context, r *run, node string) ([]connRecord, error) {
	pods, err := r.client.CoreV1().Pods(proxyNamespace).List(ctx, metav1.ListOptions{LabelSelector: proxySelector, FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, fmt.Errorf("listing meshctl-proxy pods: %w", err)
	}
	var pod string
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodRunning {
			pod = p.Name
		}
	}
	if pod == "" {
		return nil, fmt.Errorf("no running meshctl-proxy pod in %s on node %s (is the dataplane installed?)", proxyNamespace, node)
	}
	body, err := portForwardGet(ctx, r.cfg, r, pod, proxyAdminPort, connectionsAPI)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", proxyNamespace, pod, err)
	}
	var v struct {
		Connections []connRecord `json:"connections"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return nil, fmt.Errorf("%s/%s %s: %w", proxyNamespace, pod, connectionsAPI, err)
	}
	return v.Connections, nil
}

// gateways lists the addresses of the cluster's east-west gateway pods.
func (portForwardReader) gateways(ctx context.Context, r *run) ([]netip.Addr, error) {
	pods, err := r.client.CoreV1().Pods(proxyNamespace).List(ctx, metav1.ListOptions{LabelSelector: gatewaySelector})
	if err != nil {
		return nil, fmt.Errorf("listing pods %s in %s: %w", gatewaySelector, proxyNamespace, err)
	}
	var ips []netip.Addr
	for _, p := range pods.Items {
		for _, ip := range p.Status.PodIPs {
			if a, err := netip.ParseAddr(ip.IP); err == nil {
				ips = append(ips, a)
			}
		}
	}
	return ips, nil
}

// portForwardGet forwards a local port to the pod's port and GETs path.
func portForwardGet(ctx context.Context, cfg *rest.Config, r *run, pod string, port int, path string) ([]byte, error) {
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("port-forward: %w", err)
	}
	u := r.client.CoreV1().RESTClient().Post().Resource("pods").Namespace(proxyNamespace).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	stop, ready := make(chan struct{}), make(chan struct{})
	fw, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{"0:" + strconv.Itoa(port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return nil, fmt.Errorf("port-forward: %w", err)
	}
	errc := make(chan error, 1)
	go func() { errc <- fw.ForwardPorts() }()
	defer func() { close(stop); <-errc }()
	select {
	case <-ready:
	case err := <-errc:
		errc <- err
		return nil, fmt.Errorf("port-forward to port %d: %w", port, err)
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	ports, err := fw.GetPorts()
	if err != nil || len(ports) != 1 {
		return nil, fmt.Errorf("port-forward: no local port (%v)", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d%s", ports[0].Local, path), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s on port %d: %w", path, port, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("GET %s on port %d: %w", path, port, err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, fmt.Errorf("GET %s on port %d: 404: this meshctl-proxy does not log connections (older than this meshctl?)", path, port)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s on port %d: %s: %s", path, port, resp.Status, oneLine(string(body)))
	}
	return body, nil
}
