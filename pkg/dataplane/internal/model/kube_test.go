package model

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
)

func ptr[T any](v T) *T { return &v }

func namespace(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

func pod(ns, name, ip string, ready bool) *corev1.Pod {
	cond := corev1.ConditionFalse
	if ready {
		cond = corev1.ConditionTrue
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.PodSpec{ServiceAccountName: "sa-" + name, NodeName: "node1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: ip}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: cond}}},
	}
}

// webService: port 80 → 8080, port 90 → the named port "metrics".
func webService(ns, clusterIP string) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"},
		Spec: corev1.ServiceSpec{ClusterIP: clusterIP, ClusterIPs: []string{clusterIP}, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
			{Name: "metrics", Port: 90, TargetPort: intstr.FromString("metrics"), Protocol: corev1.ProtocolTCP},
		}},
	}
	if clusterIP == "" { // the API server allocates one
		s.Spec.ClusterIP, s.Spec.ClusterIPs = "", nil
	}
	return s
}

func slice(ns, name string, metricsPort int32, pods map[string]string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{
			{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)},
			{Name: ptr("metrics"), Port: ptr(metricsPort), Protocol: ptr(corev1.ProtocolTCP)},
		},
	}
	for podName, ip := range pods {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: podName}})
	}
	return s
}

func remoteSecret(cluster string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "istio-remote-secret-" + cluster,
			Labels: map[string]string{MultiClusterLabel: "true"}},
		Data: map[string][]byte{cluster: []byte("kubeconfig of " + cluster)},
	}
}

// eventually polls cond: informers deliver asynchronously.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestKubeSource: the informers turn pods, services, EndpointSlices and
// namespace labels into the model; a remote secret adds its cluster (the
// same service's endpoints there join), its deletion removes it.
func TestKubeSource(t *testing.T) {
	local := fake.NewClientset(
		namespace("istio-system", nil),
		namespace("app", map[string]string{"istio.io/dataplane-mode": "ambient"}),
		namespace("plain", nil),
		pod("app", "a", "10.1.0.5", true),
		pod("plain", "p", "10.1.0.9", true),
		webService("app", "10.96.0.10"),
		slice("app", "web-1", 9090, map[string]string{"a": "10.1.0.5"}),
	)
	remote := fake.NewClientset(
		namespace("istio-system", map[string]string{NetworkLabel: "net1"}),
		namespace("app", map[string]string{"istio.io/dataplane-mode": "ambient"}),
		pod("app", "b", "10.2.0.5", true),
		webService("app", "10.97.0.20"),
		slice("app", "web-x", 9191, map[string]string{"b": "10.2.0.5"}),
	)
	m := New("c1", "net1")
	src := NewKube(local, KubeConfig{Cluster: "c1", Network: "net1", ExcludeNamespaces: []string{"kube-system"},
		NewClient: func(kc []byte) (kubernetes.Interface, error) {
			if string(kc) != "kubeconfig of c2" {
				return nil, fmt.Errorf("unexpected kubeconfig %q", kc)
			}
			return remote, nil
		}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, m) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, "sync", m.Synced)

	up, r := m.Resolve(addr("10.96.0.10:90"))
	if r != Found || up.Addr != addr("10.1.0.5:9090") || up.Identity.String() != "spiffe://cluster.local/ns/app/sa/sa-a" || !up.HBONE {
		t.Fatalf("local VIP, named port: %+v %v", up, r)
	}
	if up, r := m.Resolve(addr("10.1.0.9:80")); r != Found || up.HBONE {
		t.Errorf("pod of a namespace not in ambient: %+v %v (want plain TCP)", up, r)
	}

	// Enrolling the namespace makes its pod HBONE.
	if _, err := local.CoreV1().Namespaces().Update(ctx, namespace("plain", map[string]string{"istio.io/dataplane-mode": "ambient"}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "namespace enrolled", func() bool { up, _ := m.Resolve(addr("10.1.0.9:80")); return up.HBONE })

	// Readiness follows the pod.
	if _, err := local.CoreV1().Pods("app").UpdateStatus(ctx, pod("app", "a", "10.1.0.5", false), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "pod unready", func() bool { _, r := m.Resolve(addr("10.96.0.10:80")); return r == NoEndpoint })

	// The remote cluster arrives with its secret: its endpoint serves the
	// local VIP, its own named port resolved from its slice.
	if _, err := local.CoreV1().Secrets("istio-system").Create(ctx, remoteSecret("c2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "remote endpoint", func() bool {
		up, r := m.Resolve(addr("10.96.0.10:90"))
		return r == Found && up.Addr == addr("10.2.0.5:9191")
	})
	if up, r := m.Resolve(addr("10.97.0.20:80")); r != Found || up.WorkloadUID != "c2//Pod/app/b" {
		t.Errorf("remote cluster's own ClusterIP: %+v %v", up, r)
	}
	d := m.Dump()
	if len(d.Services) != 1 || len(d.Services[0].VIPs) != 2 || len(d.Services[0].Endpoints) != 2 {
		t.Errorf("merged service: %+v", d.Services)
	}

	// A pod deleted in the remote cluster leaves the model.
	if err := remote.CoreV1().Pods("app").Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "remote pod gone", func() bool { _, r := m.Resolve(addr("10.2.0.5:80")); return r == NotFound })

	// The secret goes: so does everything of c2.
	if err := local.CoreV1().Secrets("istio-system").Delete(ctx, "istio-remote-secret-c2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "remote cluster gone", func() bool { _, r := m.Resolve(addr("10.97.0.20:80")); return r == NotFound })

	// The local service deleted.
	if err := local.CoreV1().Services("app").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "service gone", func() bool { return len(m.Dump().Services) == 0 })
}

// TestKubeSourceNetworkGateway: a remote cluster on another network with
// its east-west gateway — a LoadBalancer Service labelled with the network,
// as meshctl creates istio-eastwestgateway — makes that cluster's
// endpoints reachable through the gateway's load-balancer address, holding
// the gateway to its pods' identity.
func TestKubeSourceNetworkGateway(t *testing.T) {
	local := fake.NewClientset(
		namespace("istio-system", nil),
		namespace("app", map[string]string{"istio.io/dataplane-mode": "ambient"}),
		webService("app", "10.96.0.10"),
	)
	gw := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "istio-eastwestgateway", Labels: map[string]string{NetworkLabel: "net2"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.97.0.99", ClusterIPs: []string{"10.97.0.99"},
			Ports: []corev1.ServicePort{{Name: "tcp-hbone", Port: 15008, TargetPort: intstr.FromInt32(15008), Protocol: corev1.ProtocolTCP}}},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "172.18.200.1"}}}},
	}
	gwSlice := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "istio-system", Name: "gw-1", Labels: map[string]string{discoveryv1.LabelServiceName: "istio-eastwestgateway"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("tcp-hbone"), Port: ptr(int32(15008)), Protocol: ptr(corev1.ProtocolTCP)}},
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.2.0.100"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)},
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "istio-system", Name: "gw"}}},
	}
	remote := fake.NewClientset(
		namespace("istio-system", map[string]string{NetworkLabel: "net2"}),
		namespace("app", map[string]string{"istio.io/dataplane-mode": "ambient"}),
		pod("app", "b", "10.2.0.5", true),
		pod("istio-system", "gw", "10.2.0.100", true),
		webService("app", "10.97.0.20"),
		slice("app", "web-x", 9191, map[string]string{"b": "10.2.0.5"}),
		gw, gwSlice,
	)
	m := New("c1", "net1")
	src := NewKube(local, KubeConfig{Cluster: "c1", Network: "net1", ExcludeNamespaces: []string{"kube-system", "istio-system"},
		NewClient: func([]byte) (kubernetes.Interface, error) { return remote, nil }})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, m) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually(t, "sync", m.Synced)
	if _, err := local.CoreV1().Secrets("istio-system").Create(ctx, remoteSecret("c2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the remote endpoint through its gateway", func() bool {
		up, r := m.Resolve(addr("10.96.0.10:80"))
		return r == Found && up.Gateway == addr("172.18.200.1:15008") &&
			up.GatewayIdentity.String() == "spiffe://cluster.local/ns/istio-system/sa/sa-gw" &&
			len(up.Identities) == 1 && up.Identities[0].String() == "spiffe://cluster.local/ns/app/sa/sa-b"
	})

	// The load balancer loses its address: no gateway, refused.
	gw.Status.LoadBalancer.Ingress = nil
	if _, err := remote.CoreV1().Services("istio-system").UpdateStatus(ctx, gw, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "no gateway address", func() bool { _, r := m.Resolve(addr("10.96.0.10:80")); return r == NoGateway })
}
