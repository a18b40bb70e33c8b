package istioxds

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"istio.io/api/annotation"
	"istio.io/api/security/v1beta1"
	typev1beta1 "istio.io/api/type/v1beta1"
	securityclient "istio.io/client-go/pkg/apis/security/v1"
	"istio.io/istio/pilot/pkg/features"
	pilotmodel "istio.io/istio/pilot/pkg/model"
	v3 "istio.io/istio/pilot/pkg/xds/v3"
	"istio.io/istio/pilot/test/xds"
	"istio.io/istio/pkg/config/constants"
	"istio.io/istio/pkg/kube/kclient/clienttest"
	istiolog "istio.io/istio/pkg/log"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshctl/meshctl/pkg/dataplane/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/proxy"
)

const (
	istiodName = "istiod.istio-system.svc"
	cluster    = "Kubernetes" // the fake server's cluster
	podIP      = "10.244.1.5"
	clusterIP  = "10.96.0.20"
)

func init() {
	features.EnableAmbient = true
	for _, s := range istiolog.Scopes() {
		s.SetOutputLevel(istiolog.NoneLevel)
	}
}

// servingPKI is istiod's serving certificate for istiodName and the mesh
// root it chains to (what istio-ca-root-cert holds).
func servingPKI(t *testing.T) (tls.Certificate, []byte) {
	t.Helper()
	rootKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rootTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{Organization: []string{"cluster.local"}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	rootDER, err := x509.CreateCertificate(rand.Reader, rootTmpl, rootTmpl, rootKey.Public(), rootKey)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := x509.ParseCertificate(rootDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	leafDER, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), DNSNames: []string{istiodName},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, KeyUsage: x509.KeyUsageDigitalSignature,
	}, root, key.Public(), rootKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: root.Raw})
}

// noCerts: no workload is served here, so no certificate is ever asked for.
type noCerts struct{}

func (noCerts) Fetch(context.Context, certs.Request) ([]byte, []byte, error) {
	return nil, nil, errors.New("no certificates in this test")
}

// istiod runs pilot's discovery server with the ambient index, serving on a
// TLS listener as istiod serves 15012.
func istiod(t *testing.T) (*xds.FakeDiscoveryServer, string, []byte) {
	t.Helper()
	serving, root := servingPKI(t)
	var addr string
	s := xds.NewFakeDiscoveryServer(t, xds.FakeOptions{
		ListenerBuilder: func() (net.Listener, error) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				return nil, err
			}
			addr = l.Addr().String()
			return tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{serving}, NextProtos: []string{"h2"}}), nil
		},
	})
	return s, addr, root
}

func startProxy(t *testing.T, addr string, root []byte) *proxy.Proxy {
	t.Helper()
	p, err := proxy.New(
		proxy.WithFetcher(noCerts{}),
		proxy.WithAddresses("", "", ""),
		proxy.WithXDS(proxy.XDS{
			Address: addr, ServerName: istiodName,
			Roots: func() ([]byte, error) { return root, nil },
			Token: func() (string, error) { return "proxy-token", nil },
			// The fake server's cluster; its namespace matches the node ID.
			Cluster: cluster, PodName: "meshctl-proxy-x1", PodNamespace: "istio-system", NodeName: "node-1", InstanceIP: "10.244.1.2",
		}),
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return p
}

func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	var err error
	for range 3000 {
		if err = f(); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s: %v", what, err)
}

func pod(name, sa, ip string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns-b", Labels: labels,
			Annotations: map[string]string{annotation.AmbientRedirection.Name: constants.AmbientRedirectionEnabled},
		},
		Spec: corev1.PodSpec{ServiceAccountName: sa, NodeName: "node-2"},
		Status: corev1.PodStatus{
			PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}},
		},
	}
}

// TestInteropIstiodFeedsModelAndPolicies: a pod and a Service created in
// istiod's cluster become a workload (HBONE, its identity) and a service
// (VIP, port 80 → 8080, the pod as its endpoint) in meshctl's model; a
// selector AuthorizationPolicy reaches the policy store and is bound to the
// pod it selects; deleting them removes them. istiod sees meshctl's proxy
// as a ztunnel of its namespace.
func TestInteropIstiodFeedsModelAndPolicies(t *testing.T) {
	s, addr, root := istiod(t)
	p := startProxy(t, addr, root)

	pods := clienttest.NewWriter[*corev1.Pod](t, s.KubeClient())
	server := pod("server", "sa-b", podIP, map[string]string{"app": "echo"})
	pods.CreateOrUpdate(server)
	pods.UpdateStatus(server)
	clienttest.NewWriter[*corev1.Service](t, s.KubeClient()).CreateOrUpdate(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "ns-b"},
		Spec: corev1.ServiceSpec{
			ClusterIP: clusterIP, Selector: map[string]string{"app": "echo"}, Type: corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: "tcp", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	})
	policies := clienttest.NewWriter[*securityclient.AuthorizationPolicy](t, s.KubeClient())
	policies.Create(&securityclient.AuthorizationPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "allow-a", Namespace: "ns-b"},
		Spec: v1beta1.AuthorizationPolicy{
			Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "echo"}},
			Rules: []*v1beta1.Rule{{
				From: []*v1beta1.Rule_From{{Source: &v1beta1.Source{Principals: []string{"cluster.local/ns/ns-a/sa/sa-a"}}}},
				To:   []*v1beta1.Rule_To{{Operation: &v1beta1.Operation{Ports: []string{"8080"}}}},
			}},
		},
	})

	uid := cluster + "//Pod/ns-b/server"
	eventually(t, "workload, service and policy in meshctl's proxy", func() error {
		d := p.Dump()
		i := -1
		for n, w := range d.Workloads {
			if w.UID == uid {
				i = n
			}
		}
		if i < 0 {
			return fmt.Errorf("no workload %s in %+v", uid, d.Workloads)
		}
		w := d.Workloads[i]
		if w.Protocol != "HBONE" || w.ServiceAccount != "sa-b" || w.TrustDomain != "cluster.local" || w.Status != "Healthy" ||
			w.ClusterID != cluster || !slices.Equal(w.WorkloadIPs, []netip.Addr{netip.MustParseAddr(podIP)}) {
			return fmt.Errorf("workload %+v", w)
		}
		if !slices.Contains(w.AuthorizationPolicies, "ns-b/allow-a") {
			return fmt.Errorf("workload's policies %v", w.AuthorizationPolicies)
		}
		j := -1
		for n, s := range d.Services {
			if s.Namespace == "ns-b" && s.Name == "echo" {
				j = n
			}
		}
		if j < 0 {
			return fmt.Errorf("no service ns-b/echo in %+v", d.Services)
		}
		svc := d.Services[j]
		if !slices.Contains(svc.VIPs, "/"+clusterIP) || svc.Ports[80] != 8080 || svc.Endpoints[uid].Status != "Healthy" ||
			svc.Hostname != "echo.ns-b.svc.cluster.local" {
			return fmt.Errorf("service %+v", svc)
		}
		k := -1
		for n, a := range d.Policies {
			if a.Key() == "ns-b/allow-a" {
				k = n
			}
		}
		if k < 0 {
			return fmt.Errorf("no policy ns-b/allow-a in %+v", d.Policies)
		}
		a := d.Policies[k]
		if a.Scope.String() != "WorkloadSelector" || a.Action.String() != "Allow" || len(a.Rules) != 1 {
			return fmt.Errorf("policy %+v", a)
		}
		if m := a.Rules[0]; len(m) != 2 {
			return fmt.Errorf("policy rule %+v: want two clauses (ports, principals)", m)
		}
		return nil
	})

	// istiod took the proxy for a ztunnel of istio-system in its cluster.
	conns := s.Discovery.AllClients()
	if len(conns) != 1 {
		t.Fatalf("%d XDS clients", len(conns))
	}
	px := conns[0].Proxy()
	if px.Type != pilotmodel.Ztunnel || px.ConfigNamespace != "istio-system" || px.Metadata.ClusterID.String() != cluster ||
		px.Metadata.NodeName != "node-1" {
		t.Fatalf("istiod sees the proxy as %s in %s, cluster %s, node %s", px.Type, px.ConfigNamespace, px.Metadata.ClusterID, px.Metadata.NodeName)
	}

	policies.Delete("allow-a", "ns-b")
	pods.Delete("server", "ns-b")
	eventually(t, "deletions", func() error {
		d := p.Dump()
		for _, w := range d.Workloads {
			if w.UID == uid {
				return errors.New("workload still there")
			}
		}
		for _, a := range d.Policies {
			if a.Key() == "ns-b/allow-a" {
				return errors.New("policy still there")
			}
		}
		return nil
	})
}

// TestInteropNACK: a PeerAuthentication with a port above 65535 (which
// Istio's CRD validation would refuse, but istiod converts without a
// check) reaches meshctl as a policy on that port; meshctl refuses it and
// istiod records the NACK with meshctl's reason, while the rest of the
// mesh (a valid policy) keeps flowing.
func TestInteropNACK(t *testing.T) {
	s, addr, root := istiod(t)
	p := startProxy(t, addr, root)

	clienttest.NewWriter[*securityclient.PeerAuthentication](t, s.KubeClient()).Create(&securityclient.PeerAuthentication{
		ObjectMeta: metav1.ObjectMeta{Name: "bad-port", Namespace: "ns-b"},
		Spec: v1beta1.PeerAuthentication{
			Selector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "echo"}},
			Mtls:     &v1beta1.PeerAuthentication_MutualTLS{Mode: v1beta1.PeerAuthentication_MutualTLS_PERMISSIVE},
			PortLevelMtls: map[uint32]*v1beta1.PeerAuthentication_MutualTLS{
				70000: {Mode: v1beta1.PeerAuthentication_MutualTLS_STRICT},
			},
		},
	})
	eventually(t, "istiod records meshctl's NACK", func() error {
		for _, c := range s.Discovery.AllClients() {
			wr := c.Proxy().GetWatchedResource(v3.WorkloadAuthorizationType)
			if wr != nil && strings.Contains(wr.LastError, "ns-b/converted_peer_authentication_bad-port: ") &&
				strings.Contains(wr.LastError, "port 70000 out of range") {
				return nil
			}
			if wr != nil {
				return fmt.Errorf("last error %q", wr.LastError)
			}
		}
		return errors.New("no watched authorization resource")
	})
	for _, a := range p.Dump().Policies {
		if strings.Contains(a.Name, "bad-port") {
			t.Fatalf("the refused policy reached the policy store: %+v", a)
		}
	}

	clienttest.NewWriter[*securityclient.AuthorizationPolicy](t, s.KubeClient()).Create(&securityclient.AuthorizationPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "deny-all", Namespace: "ns-b"},
		Spec:       v1beta1.AuthorizationPolicy{Action: v1beta1.AuthorizationPolicy_DENY, Rules: []*v1beta1.Rule{{}}},
	})
	eventually(t, "a valid policy after the NACK", func() error {
		for _, a := range p.Dump().Policies {
			if a.Key() == "ns-b/deny-all" {
				return nil
			}
		}
		return fmt.Errorf("policies %+v", p.Dump().Policies)
	})
}
