package hbone

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	h2specconfig "github.com/summerwind/h2spec/config"
	"github.com/summerwind/h2spec/generic"
	"github.com/summerwind/h2spec/hpack"
	h2spechttp2 "github.com/summerwind/h2spec/http2"
	"github.com/summerwind/h2spec/spec"
)

// h2specNotApplicable are h2spec cases that assume a server answering GET
// with a body, or one that reads a request's body before answering; h2spec
// can only send GET and POST, which a CONNECT-only server answers at once
// with 400 and END_STREAM and then resets the request side (RFC 9113 8.1
// allows both), so these cases cannot observe what they test. The answer is
// decided on the read loop (h2tun.Config.Admit), before h2spec's next frame
// is read, so which cases these are does not depend on scheduling: with the
// answer on a handler goroutine, 6.9.1 below passed or failed by the race
// (it failed in CI).
var h2specNotApplicable = map[string]string{
	"generic/2 Sends a WINDOW_UPDATE frame on half-closed (remote) stream": "expects a response body (DATA)",
	"generic/2 Sends a PRIORITY frame on half-closed (remote) stream":      "expects a response body (DATA)",
	"http2/5.1.2 Sends HEADERS frames that causes their advertised concurrent stream limit to be exceeded": "" +
		"each GET is answered and closed before the next arrives, so the limit is never reached",
	"http2/6.9.1 Sends multiple WINDOW_UPDATE frames increasing the flow control window to above 2^31-1 on a stream": "" +
		"the request is answered and reset before the WINDOW_UPDATEs arrive, which RFC 9113 5.1 then says to ignore",
	"http2/8.1 Sends a second HEADERS frame without the END_STREAM flag": "" +
		"the request is answered and reset before the second HEADERS arrives, which RFC 9113 5.1 then says to ignore",
	"http2/8.1.2.1 Sends a HEADERS frame that contains a pseudo-header field as trailers": "" +
		"the request is answered and reset before the trailers arrive, which RFC 9113 5.1 then says to ignore",
	"http2/8.1.2.6 Sends a HEADERS frame with the \"content-length\" header field which does not equal the DATA frame payload length": "" +
		"the request is answered and reset before its body arrives",
	"http2/8.1.2.6 Sends a HEADERS frame with the \"content-length\" header field which does not equal the sum of the multiple DATA frames payload length": "" +
		"the request is answered and reset before its body arrives",
}

// TestH2Spec runs h2spec's server suite (generic, http2 including strict
// cases, hpack) against the HBONE server over mutual TLS with a mesh
// certificate. Every case must pass except those in h2specNotApplicable.
func TestH2Spec(t *testing.T) {
	if testing.Short() {
		t.Skip("h2spec takes about 15 s; it runs without -short")
	}
	e := newEnv(t)
	dir := t.TempDir()
	cert := issue(t, e.ca, clientID)
	var chain []byte
	for _, der := range cert.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	key, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, chain, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: key}), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := &h2specconfig.Config{
		Host: e.serverAddr.Addr().String(), Port: int(e.serverAddr.Port()), Path: "/",
		Timeout: 2 * time.Second, MaxHeaderLen: 4000,
		TLS: true, Insecure: true, CertFile: certFile, CertKeyFile: keyFile,
		Strict: true,
	}
	passed, failed, skipped := 0, 0, 0
	for _, g := range []*spec.TestGroup{generic.Spec(), h2spechttp2.Spec(), hpack.Spec()} {
		g.Test(cfg)
		report(t, g)
		passed, failed, skipped = passed+g.PassedCount, failed+g.FailedCount, skipped+g.SkippedCount
	}
	t.Logf("h2spec: %d passed, %d failed, %d skipped", passed, failed, skipped)
}

func report(t *testing.T, g *spec.TestGroup) {
	for _, tc := range append(g.Tests, g.StrictTests...) {
		if tc.Result == nil || !tc.Result.Failed {
			continue
		}
		if why, ok := h2specNotApplicable[tc.Parent.ID()+" "+tc.Desc]; ok {
			t.Logf("h2spec %s %s: failed, not applicable: %s", tc.Parent.ID(), tc.Desc, why)
			continue
		}
		t.Errorf("h2spec %s %s: %s", tc.Parent.ID(), tc.Desc, strings.ReplaceAll(tc.Result.Error.Error(), "\n", "; "))
	}
	for _, sg := range g.Groups {
		report(t, sg)
	}
}
