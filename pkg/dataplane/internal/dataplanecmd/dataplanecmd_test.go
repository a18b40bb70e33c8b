package dataplanecmd

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshctl/meshctl/internal/syncbuf"
)

// TestInstallCNI runs install-cni as the DaemonSet does, through Main's
// argv (the charts' `dataplane install-cni …`), against host-like temp
// dirs: the plugin is chained and copied, then removed when it stops.
func TestInstallCNI(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	conf, bin, sa := filepath.Join(root, "net.d"), filepath.Join(root, "bin"), filepath.Join(root, "sa")
	for _, d := range []string{conf, bin, sa} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, data := range map[string]string{
		filepath.Join(sa, "token"):                 "token",
		filepath.Join(sa, "ca.crt"):                "ca",
		filepath.Join(conf, "10-kindnet.conflist"): `{"cniVersion":"0.3.1","name":"kindnet","plugins":[{"type":"ptp"}]}`,
		filepath.Join(root, "plugin"):              "#!binary",
	} {
		if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	errs := &syncbuf.Buffer{}
	done := make(chan error)
	go func() {
		done <- Run(ctx, "install-cni", []string{
			"--cni-conf-dir", conf, "--cni-bin-dir=" + bin, "--plugin-binary", filepath.Join(root, "plugin"),
			"--exclude-namespaces", "kube-system, istio-system", "--ready-addr", "127.0.0.1:0",
			"--host-cni-conf-dir", "/etc/cni/net.d", "--service-account-dir", sa, "--verbosity=2"}, errs)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		data, _ := os.ReadFile(filepath.Join(conf, "10-kindnet.conflist"))
		if strings.Contains(string(data), `"meshctl-cni"`) && strings.Contains(string(data), `"istio-system"`) {
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("plugin never chained: %s\nlogs: %s", data, errs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got, err := os.ReadFile(filepath.Join(bin, "meshctl-cni")); err != nil || string(got) != "#!binary" {
		t.Errorf("plugin binary: %q, %v", got, err)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Errorf("install-cni: %v\n%s", err, errs)
	}
	data, _ := os.ReadFile(filepath.Join(conf, "10-kindnet.conflist"))
	if strings.Contains(string(data), "meshctl-cni") {
		t.Errorf("entry left after exit: %s", data)
	}
	if _, err := os.Stat(filepath.Join(bin, "meshctl-cni")); !os.IsNotExist(err) {
		t.Errorf("plugin binary left after exit: %v", err)
	}
	if !strings.Contains(errs.String(), "level=") {
		t.Errorf("no structured log lines: %s", errs)
	}
}

// TestMainArgs runs the binary's argv: with and without the charts'
// "dataplane" word, bad input named, --help answered.
func TestMainArgs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args      []string
		code      int
		out, errs string
	}{
		{nil, 1, "", "install-cni"},
		{[]string{"--help"}, 0, "node-agent", ""},
		{[]string{"dataplane"}, 1, "", "signer"},
		{[]string{"dataplane", "node-agent", "--node-name", ""}, 1, "", "node name not set"},
		{[]string{"node-agent", "--node-name="}, 1, "", "node name not set"},
		{[]string{"dataplane", "signer", "--cacerts-dir", "/nonexistent"}, 1, "", "reading cacerts"},
		{[]string{"dataplane", "install-cni", "--daemonset", "x", "--namespace", ""}, 1, "", "POD_NAMESPACE"},
		{[]string{"dataplane", "proxy", "--mesh-cidrs", "10.0.0.0/8,nonsense"}, 1, "", "--mesh-cidrs"},
		{[]string{"dataplane", "proxy", "--no-such-flag"}, 1, "", "proxy: flag provided but not defined: -no-such-flag"},
		{[]string{"dataplane", "proxy", "extra"}, 1, "", `proxy: unexpected argument "extra"`},
		// Istio's ztunnel chart runs `proxy ztunnel`: taken, and only there.
		{[]string{"proxy", "ztunnel", "--mesh-cidrs", "nonsense"}, 1, "", "--mesh-cidrs"},
		{[]string{"proxy", "ztunnel", "extra"}, 1, "", `proxy: unexpected argument "extra"`},
		{[]string{"install-cni", "ztunnel"}, 1, "", `install-cni: unexpected argument "ztunnel"`},
		{[]string{"dataplane", "ztunnel"}, 1, "", `unknown dataplane command "ztunnel" (want one of install-cni, node-agent, proxy, gateway, signer)`},
		{[]string{"dataplane", "gateway", "--namespace=istio-system", "--service-account=", "--pod-name=p", "--pod-uid=u", "--network=n"}, 1, "", "SERVICE_ACCOUNT"},
		{[]string{"dataplane", "gateway", "--namespace=istio-system", "--service-account=gw", "--pod-name=p", "--pod-uid=u", "--network="}, 1, "", "--network is empty"},
		{[]string{"dataplane", "gateway", "--help"}, 0, "", "-listen string"},
		{[]string{"dataplane", "proxy", "--help"}, 0, "", "-trust-domain string"},
	}
	for _, tt := range tests {
		var out, errs bytes.Buffer
		code := Main(tt.args, &out, &errs)
		if code != tt.code || !strings.Contains(out.String(), tt.out) || !strings.Contains(errs.String(), tt.errs) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit %d, %q, %q", tt.args, code, out.String(), errs.String(), tt.code, tt.out, tt.errs)
		}
	}
}

// TestFromEnv: MESHCTL_<FLAG> sets what the command line left unset, the
// command line wins, and a bad value names its variable.
func TestFromEnv(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	td := fs.String("trust-domain", "cluster.local", "")
	ttl := fs.Duration("cert-ttl", time.Hour, "")
	cidrs := newList(fs, "mesh-cidrs", []string{"10.0.0.0/8"}, "")
	var v int
	fs.IntVar(&v, "verbosity", 0, "")
	fs.IntVar(&v, "v", 0, "")
	if err := fs.Parse([]string{"--trust-domain=flag.example", "-v", "1"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"MESHCTL_TRUST_DOMAIN": "env.example",
		"MESHCTL_CERT_TTL":     "2h",
		"MESHCTL_MESH_CIDRS":   "10.1.0.0/16,fd00::/64",
		"MESHCTL_VERBOSITY":    "3",
	}
	lookup := func(k string) (string, bool) { s, ok := env[k]; return s, ok }
	if err := fromEnv(fs, lookup); err != nil {
		t.Fatal(err)
	}
	if *td != "flag.example" || *ttl != 2*time.Hour || !slices.Equal(*cidrs, []string{"10.1.0.0/16", "fd00::/64"}) || v != 1 {
		t.Errorf("trust-domain %q cert-ttl %v mesh-cidrs %q verbosity %d", *td, *ttl, *cidrs, v)
	}
	env = map[string]string{"MESHCTL_CERT_TTL": "soon"}
	fs = flag.NewFlagSet("x", flag.ContinueOnError)
	fs.Duration("cert-ttl", time.Hour, "")
	if err := fromEnv(fs, lookup); err == nil || !strings.Contains(err.Error(), `MESHCTL_CERT_TTL="soon"`) {
		t.Errorf("bad duration in the environment: %v", err)
	}
}

// TestList: the first use replaces the default, later ones append, as
// pflag's StringSlice did for these flags.
func TestList(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		want []string
	}{
		{nil, []string{"kube-system"}},
		{[]string{"--ns=a,b"}, []string{"a", "b"}},
		{[]string{"--ns", "a", "--ns", " b , c "}, []string{"a", "b", "c"}},
		{[]string{"--ns="}, nil},
	} {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		got := newList(fs, "ns", []string{"kube-system"}, "")
		if err := fs.Parse(tt.args); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(*got, tt.want) {
			t.Errorf("%q: %q, want %q", tt.args, *got, tt.want)
		}
	}
}

// TestCARootSource reads the mesh root from a file or from the
// istio-ca-root-cert ConfigMap, and names --ca-root in what goes wrong.
func TestCARootSource(t *testing.T) {
	t.Parallel()
	cs := fake.NewClientset(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "istio-ca-root-cert"},
		Data:       map[string]string{"root-cert.pem": "ROOT"},
	}, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "empty"},
	})
	file := filepath.Join(t.TempDir(), "root-cert.pem")
	if err := os.WriteFile(file, []byte("FILEROOT"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ spec, want, wantErr string }{
		{spec: file, want: "FILEROOT"},
		{spec: "configmap:istio-ca-root-cert", want: "ROOT"},
		{spec: "configmap:istio-system/istio-ca-root-cert", want: "ROOT"},
		{spec: "configmap:other/empty", wantErr: "--ca-root: ConfigMap other/empty has no root-cert.pem"},
		{spec: "configmap:other/missing", wantErr: `--ca-root: reading ConfigMap other/missing`},
		{spec: filepath.Join(t.TempDir(), "absent"), wantErr: "--ca-root: open "},
	} {
		roots, err := caRootSource(c.spec, "istio-system", cs)
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		got, err := roots()
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: error %v, want %q", c.spec, err, c.wantErr)
			}
			continue
		}
		if err != nil || string(got) != c.want {
			t.Errorf("%s: %q, %v; want %q", c.spec, got, err, c.want)
		}
	}
	for _, bad := range []string{"", "configmap:", "configmap:a/b/c", "configmap:/x"} {
		if _, err := caRootSource(bad, "istio-system", cs); err == nil || !strings.Contains(err.Error(), "--ca-root") {
			t.Errorf("%q: error %v, want one naming --ca-root", bad, err)
		}
	}
}

// TestFromZtunnelEnv: under Istio's ztunnel chart, its variables fill the
// flags nothing else set; the command line and MESHCTL_<FLAG> win, and an
// empty variable is no setting.
func TestFromZtunnelEnv(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("proxy", flag.ContinueOnError)
	ca := fs.String("ca-address", "", "")
	xds := fs.String("xds-address", "", "")
	cluster := fs.String("cluster", "Kubernetes", "")
	network := fs.String("network", "", "")
	if err := fs.Parse([]string{"--xds-address=flag:15012"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"CA_ADDRESS":            "istiod.istio-system.svc:15012",
		"XDS_ADDRESS":           "env:15012",
		"ISTIO_META_CLUSTER_ID": "cluster1",
		"MESHCTL_NETWORK":       "network9",
		"NETWORK":               "",
	}
	lookup := func(k string) (string, bool) { s, ok := env[k]; return s, ok }
	if err := fromEnv(fs, lookup); err != nil {
		t.Fatal(err)
	}
	if err := fromZtunnelEnv(fs, lookup); err != nil {
		t.Fatal(err)
	}
	if *ca != "istiod.istio-system.svc:15012" || *xds != "flag:15012" || *cluster != "cluster1" || *network != "network9" {
		t.Errorf("ca-address %q xds-address %q cluster %q network %q", *ca, *xds, *cluster, *network)
	}
	if rest, ok := ztunnelShape("proxy", []string{"ztunnel", "-v", "2"}); !ok || !slices.Equal(rest, []string{"-v", "2"}) {
		t.Errorf("ztunnelShape(proxy ztunnel -v 2) = %q, %v", rest, ok)
	}
	if _, ok := ztunnelShape("proxy", []string{"--cluster=ztunnel"}); ok {
		t.Error("a flag's value taken for ztunnel's argument")
	}
}
