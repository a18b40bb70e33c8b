package signer

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/certs"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/csr"
	"github.com/meshctl/meshctl/pkg/meshca"
)

// TestManagerThroughCSRs wires the pieces as a node runs them: the proxy's
// certificate manager fetches through csr.Client, the signer controller signs
// with the cluster intermediate, and the manager serves a verifiable
// certificate and the mesh roots; a pod on another node gets nothing.
func TestManagerThroughCSRs(t *testing.T) {
	t.Parallel()
	c, err := meshca.NewTest("e2e")
	if err != nil {
		t.Fatal(err)
	}
	api := newAPIServer(
		pod("default", "here", "uid-here", "web", "node-1"),
		pod("default", "there", "uid-there", "db", "node-2"),
	)
	api.as(proxyUser, "node-1") // this manager is the proxy of node-1
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := New(api, c, WithProxyUsers(proxyUser))
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	m := certs.New(csr.NewClient(api, csr.WithPollInterval(10*time.Millisecond)), certs.WithBackoff(10*time.Millisecond, 50*time.Millisecond))
	defer m.Close()
	web := identity.New("cluster.local", "default", "web")
	db := identity.New("cluster.local", "default", "db")
	m.Track(web, certs.Pod{Namespace: "default", Name: "here", UID: "uid-here"})
	m.Track(db, certs.Pod{Namespace: "default", Name: "there", UID: "uid-there"})

	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	cert, err := m.Certificate(wctx, web)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := identity.Verify(cert.Certificate, m.Roots(), "cluster.local", web, time.Now()); err != nil {
		t.Fatalf("certificate from the CSR flow: %v", err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer dcancel()
	if _, err := m.Certificate(dctx, db); err == nil {
		t.Fatal("node-1's proxy obtained the identity of a pod on node-2")
	}
	for _, d := range m.Dump() {
		if d.Identity == db.String() && !strings.HasPrefix(d.State, certs.StateUnavailable) {
			t.Errorf("db certificate state %q, want Unavailable", d.State)
		}
	}
}
