package hbone

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
)

// FuzzServeCONNECT feeds arbitrary methods, authorities and a header to the
// inbound handler. Whatever the input, the answer is a refusal code, and the
// handler only ever tries to reach the connection's own destination IP on a
// port that is not the proxy's.
func FuzzServeCONNECT(f *testing.F) {
	for _, s := range [][3]string{
		{"CONNECT", "10.0.0.5:8080", ""}, {"GET", "10.0.0.5:8080", ""}, {"CONNECT", "10.0.0.6:80", ""},
		{"CONNECT", "10.0.0.5:15008", ""}, {"CONNECT", "127.0.0.1:80", ""}, {"CONNECT", "[::1]:80", "x"},
		{"CONNECT", "localhost:80", ""}, {"CONNECT", "10.0.0.5:0", "forwarded"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	dst := netip.MustParseAddrPort("10.0.0.5:15008")
	var dialed netip.AddrPort
	s, err := NewServer(
		WithRoots(func() *x509.CertPool { return x509.NewCertPool() }),
		WithServerCertificates(func(context.Context, netip.Addr) (*tls.Certificate, error) { return nil, errors.New("unused") }),
		WithDialContext(func(_ context.Context, _, addr string) (net.Conn, error) {
			dialed = netip.MustParseAddrPort(addr)
			return nil, errors.New("fuzz: no upstream")
		}),
	)
	if err != nil {
		f.Fatal(err)
	}
	info := &connInfo{peer: identity.New(td, "ns", "sa"), src: netip.MustParseAddrPort("10.0.0.9:40000"), dst: dst}
	f.Fuzz(func(t *testing.T, method, authority, header string) {
		if !validMethod(method) {
			return // net/http would never hand such a request to a handler
		}
		dialed = netip.AddrPort{}
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Method, r.Host = method, authority
		r.Header = http.Header{"X-Fuzz": {header}}
		r = r.WithContext(context.WithValue(context.Background(), connInfoKey{}, info))
		w := httptest.NewRecorder()
		s.ServeHTTP(w, r)
		switch w.Code {
		case http.StatusBadRequest, http.StatusRequestHeaderFieldsTooLarge:
			if dialed.IsValid() {
				t.Fatalf("%s %q refused with %d after dialing %s", method, authority, w.Code, dialed)
			}
		case http.StatusServiceUnavailable:
			if dialed.Addr() != dst.Addr() || IsSelfCallPort(dialed.Port()) || dialed.String() != authority {
				t.Fatalf("%s %q dialed %s", method, authority, dialed)
			}
		default:
			t.Fatalf("%s %q answered %d", method, authority, w.Code)
		}
	})
}

func validMethod(m string) bool {
	if m == "" {
		return false
	}
	for _, c := range m {
		if c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return true
}
