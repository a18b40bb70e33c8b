package certs

import (
	"crypto/x509"
	"net/url"
	"sort"
	"time"

	"github.com/meshctl/meshctl/pkg/meshca"
)

type (
	urlT     = url.URL
	x509Cert = x509.Certificate
)

// CertDump is one certificate in /config_dump, in ztunnel's shape.
type CertDump struct {
	Identity  string     `json:"identity"`
	State     string     `json:"state"`
	CertChain []CertInfo `json:"certChain"`
	RootCerts []CertInfo `json:"rootCerts"`
}

// CertInfo describes one certificate of a chain.
type CertInfo struct {
	PEM            string    `json:"pem"`
	SerialNumber   string    `json:"serialNumber"`
	ValidFrom      time.Time `json:"validFrom"`
	ExpirationTime time.Time `json:"expirationTime"`
}

// Dump describes every tracked certificate, sorted by identity.
func (m *Manager) Dump() []CertDump {
	m.mu.Lock()
	defer m.mu.Unlock()
	roots, _ := meshca.ParseCertificates(m.rootPEM)
	now := m.clock.Now()
	out := make([]CertDump, 0, len(m.entries))
	for id, e := range m.entries {
		d := CertDump{Identity: id.String(), State: StateInitializing, CertChain: []CertInfo{}, RootCerts: []CertInfo{}}
		switch {
		case e.cert != nil && now.Before(e.cert.Leaf.NotAfter):
			d.State = StateAvailable
		case e.lastErr != nil:
			d.State = StateUnavailable + ": " + e.lastErr.Error()
		case e.cert != nil:
			d.State = StateUnavailable + ": certificate expired"
		}
		for _, c := range e.chain {
			d.CertChain = append(d.CertChain, info(c))
		}
		for _, r := range roots {
			d.RootCerts = append(d.RootCerts, info(r))
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Identity < out[j].Identity })
	return out
}

func info(c *x509Cert) CertInfo {
	return CertInfo{
		PEM:            string(meshca.EncodeCertificates([]*x509Cert{c})),
		SerialNumber:   c.SerialNumber.Text(16),
		ValidFrom:      c.NotBefore,
		ExpirationTime: c.NotAfter,
	}
}
