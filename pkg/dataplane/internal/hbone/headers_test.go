package hbone

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"net/netip"
	"regexp"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
)

// TestDialerSendsZtunnelHeaders checks the CONNECT request on the wire as a
// plain h2 server sees it: :authority is the original destination, and
// forwarded, baggage and traceparent are set as ztunnel sets them.
func TestDialerSendsZtunnelHeaders(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	srvCert := issue(t, e.ca, serverID)
	ln := listen(t, "127.0.0.1:0")
	got := make(chan *http.Request, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		tc := tls.Server(c, &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"},
			Certificates: []tls.Certificate{*srvCert}, ClientAuth: tls.RequireAnyClientCert})
		if err := tc.Handshake(); err != nil { // the h2 server checks the negotiated TLS state
			return
		}
		//lint:ignore SA1019 x/net/http2's server is wanted here: an h2 implementation independent of h2tun
		(&http2.Server{}).ServeConn(tc, &http2.ServeConnOpts{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			got <- r
			w.WriteHeader(http.StatusOK)
		})})
	}()
	cli := issue(t, e.ca, clientID)
	d, err := NewDialer(
		WithRoots(func() *x509.CertPool { return e.ca.RootPool() }),
		WithClientCertificates(func(context.Context, identity.Identity) (*tls.Certificate, error) { return cli, nil }))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := d.Dial(ctx, Target{Source: clientID, SourceAddr: netip.MustParseAddr("10.1.2.3"),
		Gateway: addrPortOf(ln.Addr()), Destination: netip.MustParseAddrPort("10.9.8.7:8080"), Peer: serverID,
		Baggage: "k8s.namespace.name=ns-a"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := <-got
	if r.Method != http.MethodConnect || r.Host != "10.9.8.7:8080" {
		t.Errorf("request %s %s, want CONNECT 10.9.8.7:8080", r.Method, r.Host)
	}
	if f := r.Header.Get("Forwarded"); f != `for="10.1.2.3"` {
		t.Errorf("forwarded = %q", f)
	}
	if b := r.Header.Get("Baggage"); b != "k8s.namespace.name=ns-a" {
		t.Errorf("baggage = %q", b)
	}
	if tp := r.Header.Get("Traceparent"); !regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`).MatchString(tp) {
		t.Errorf("traceparent = %q", tp)
	}
	var _ net.Conn = c
}
