package hbone

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the HBONE counters one proxy exports on :15020. They are a value
// the caller registers, not globals, so several proxies (tests, benchmarks)
// can live in one process.
type Metrics struct {
	opened     *prometheus.CounterVec
	closed     *prometheus.CounterVec
	sent       *prometheus.CounterVec
	received   *prometheus.CounterVec
	handshake  *prometheus.CounterVec
	rejects    *prometheus.CounterVec
	h2Errors   *prometheus.CounterVec
	limited    *prometheus.CounterVec
	poolConns  prometheus.Gauge
	poolDialed prometheus.Counter
}

// NewMetrics creates the HBONE metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		opened: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshctl_hbone_connections_opened_total", Help: "TCP connections opened, by direction: inbound and outbound are HBONE tunnels; inbound_plaintext and outbound_passthrough are not.",
		}, []string{"direction"}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshctl_hbone_connections_closed_total", Help: "TCP connections closed, by direction (as opened).",
		}, []string{"direction"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshctl_hbone_sent_bytes_total", Help: "Bytes sent into tunnels (towards the peer proxy).",
		}, []string{"direction"}),
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshctl_hbone_received_bytes_total", Help: "Bytes received from tunnels.",
		}, []string{"direction"}),
		handshake: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshctl_hbone_handshake_failures_total", Help: "Failed HBONE TLS handshakes, by reason.",
		}, []string{"direction", "reason"}),
		rejects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshctl_hbone_inbound_rejects_total", Help: "Inbound CONNECT requests refused, by status code and reason.",
		}, []string{"code", "reason"}),
		h2Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshctl_hbone_h2_errors_total", Help: "HTTP/2 errors by type: protocol errors refused (stream floods, bad frames), and ping_timeout, a pooled connection closed because it did not ack the PING sent after a CONNECT got no answer.",
		}, []string{"type"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshctl_hbone_inbound_limited_total", Help: "Inbound connections closed and CONNECT requests refused because a peer reached a limit, by limit.",
		}, []string{"limit"}),
		poolConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshctl_hbone_pool_connections", Help: "Outbound HBONE h2 connections currently pooled.",
		}),
		poolDialed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshctl_hbone_pool_dials_total", Help: "Outbound HBONE h2 connections dialed.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.opened, m.closed, m.sent, m.received, m.handshake, m.rejects, m.h2Errors, m.limited, m.poolConns, m.poolDialed)
	}
	return m
}

// Plain records a connection the proxy carried without HBONE (inbound
// plaintext on 15006, outbound passthrough), so every connection shows up in
// the same counters; call the returned function with the byte counts when it
// ends.
func (m *Metrics) Plain(direction string) func(sent, received int64) {
	m.opened.WithLabelValues(direction).Inc()
	return func(sent, received int64) {
		m.sent.WithLabelValues(direction).Add(float64(sent))
		m.received.WithLabelValues(direction).Add(float64(received))
		m.closed.WithLabelValues(direction).Inc()
	}
}
