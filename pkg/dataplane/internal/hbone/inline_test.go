package hbone

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"io"
	"net"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
)

// TestInlineDeliveryThroughProxy runs app -> Proxy -> Server -> echo with
// inline delivery (the default) on both proxies: small round trips (the
// inline path) then a bulk transfer past the windows (the buffered path
// too) must come back intact and in order, and the bytes metrics must count
// every byte once.
func TestInlineDeliveryThroughProxy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	cm := NewMetrics(prometheus.NewRegistry())
	cliCert, roots := issue(t, e.ca, clientID), e.ca.RootPool()
	d, err := NewDialer(
		WithRoots(func() *x509.CertPool { return roots }),
		WithClientCertificates(func(context.Context, identity.Identity) (*tls.Certificate, error) { return cliCert, nil }),
		WithMetrics(cm))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })

	app, down := tcpPair(t)
	proxyDone := make(chan error, 1)
	go func() { proxyDone <- d.Proxy(context.Background(), e.target(e.echoAddr), down) }()

	sent := 0
	req, resp := make([]byte, 1024), make([]byte, 1024)
	for i := range 200 {
		binary.BigEndian.PutUint32(req, uint32(i))
		if _, err := app.Write(req); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(app, resp); err != nil {
			t.Fatalf("round trip %d: %v", i, err)
		}
		if !bytes.Equal(req, resp) {
			t.Fatalf("round trip %d: echo differs", i)
		}
		sent += len(req)
	}
	bulk := make([]byte, 8<<20) // over the 4 MiB stream window
	for i := 0; i+4 <= len(bulk); i += 4 {
		binary.BigEndian.PutUint32(bulk[i:], uint32(i))
	}
	go func() {
		_, _ = app.Write(bulk)
		_ = app.(*net.TCPConn).CloseWrite()
	}()
	got, err := io.ReadAll(app)
	if err != nil || !bytes.Equal(got, bulk) {
		t.Fatalf("bulk echo: %d bytes (want %d), equal %v, err %v", len(got), len(bulk), bytes.Equal(got, bulk), err)
	}
	sent += len(bulk)
	if err := <-proxyDone; err != nil {
		t.Fatalf("Proxy: %v", err)
	}
	waitFor(t, func() bool { return counter(e.sm.received.WithLabelValues("inbound")) == float64(sent) })
	if n := counter(cm.received.WithLabelValues("outbound")); n != float64(sent) {
		t.Fatalf("client received metric %v, want %d", n, sent)
	}
}
