package hbone

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/meshctl/meshctl/pkg/dataplane/identity"
	"github.com/meshctl/meshctl/pkg/meshca"
)

// Benchmarks compare, on loopback and side by side: plain TCP, TLS 1.3 only
// (the same ECDSA P-256 certificates, one handshake per connection), TLS 1.3
// through the same two proxy hops HBONE has (TLS13Proxied), and the HBONE path app → client proxy (Dialer.Proxy on an accepted socket) →
// mutual TLS + h2 CONNECT → Server → destination. Run with `make bench`.

// transport opens connections to a destination service ("sink" or "echo").
type transport struct {
	name string
	dial func(b *testing.B, service string) net.Conn
}

type benchEnv struct {
	ca      *meshca.CA
	tlsConf *tls.Config // client side of TLS-only
	addrs   map[string]map[string]netip.AddrPort
}

// sink reads everything and answers one byte at EOF, so a writer can wait
// until its data has really arrived.
func sink(b testing.TB, ln net.Listener) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 256<<10)
				for {
					if _, err := c.Read(buf); err != nil {
						break
					}
				}
				_, _ = c.Write([]byte{1})
			}()
		}
	}()
}

func echoOn(ln net.Listener) {
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
}

func newBenchEnv(b *testing.B) *benchEnv {
	b.Helper()
	c, err := meshca.NewTest("bench")
	if err != nil {
		b.Fatal(err)
	}
	e := &benchEnv{ca: c, addrs: map[string]map[string]netip.AddrPort{"tcp": {}, "tls": {}, "tlsproxy": {}, "hbone": {}, "hbonenoinline": {}}}
	srvCert, cliCert := issue(b, c, serverID), issue(b, c, clientID)
	roots := c.RootPool()
	serve := map[string]func(net.Listener){"sink": func(ln net.Listener) { sink(b, ln) }, "echo": echoOn}
	tlsServer := &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{*srvCert}}
	for name, run := range serve {
		ln := listen(b, "127.0.0.1:0")
		run(ln)
		e.addrs["tcp"][name] = addrPortOf(ln.Addr())
		tln := tls.NewListener(listen(b, "127.0.0.1:0"), tlsServer)
		run(tln)
		e.addrs["tls"][name] = addrPortOf(tln.Addr())
	}
	e.tlsConf = &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: x509.NewCertPool(), InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			_, err := identity.Verify(rawCerts(cs.PeerCertificates), roots, td, serverID, time.Now())
			return err
		}}

	// TLS 1.3 through the same two proxy hops as HBONE, without h2: one TLS
	// connection per proxied connection. It separates the cost of the hops
	// from the cost of HBONE's framing.
	for name := range serve {
		dst := e.addrs["tcp"][name]
		back := tls.NewListener(listen(b, "127.0.0.1:0"), tlsServer)
		go proxyLoop(back, func() (net.Conn, error) { return net.Dial("tcp", dst.String()) })
		backAddr := back.Addr().String()
		front := listen(b, "127.0.0.1:0")
		go proxyLoop(front, func() (net.Conn, error) { return tls.Dial("tcp", backAddr, e.tlsConf) })
		e.addrs["tlsproxy"][name] = addrPortOf(front.Addr())
	}

	// HBONE twice: as configured by default, and without h2tun's inline
	// delivery (withNoInline), so one run compares the two.
	for kind, opt := range map[string]Option{"hbone": withNoInline(false), "hbonenoinline": withNoInline(true)} {
		hln := listen(b, "127.0.0.1:0")
		startServer(b, hln,
			WithRoots(func() *x509.CertPool { return roots }),
			WithServerCertificates(func(context.Context, netip.Addr) (*tls.Certificate, error) { return srvCert, nil }),
			WithAllowLoopback(true), opt)
		dialer, err := NewDialer(
			WithRoots(func() *x509.CertPool { return roots }),
			WithClientCertificates(func(context.Context, identity.Identity) (*tls.Certificate, error) { return cliCert, nil }),
			opt)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = dialer.Close() })
		// The client proxy: one front listener per destination stands in for
		// 15001 + SO_ORIGINAL_DST, which need a network namespace.
		for name := range serve {
			front := listen(b, "127.0.0.1:0")
			tgt := Target{Source: clientID, SourceAddr: netip.MustParseAddr("127.0.0.1"), Gateway: addrPortOf(hln.Addr()),
				Destination: e.addrs["tcp"][name], Peer: serverID}
			go func() {
				for {
					c, err := front.Accept()
					if err != nil {
						return
					}
					go func() { _ = dialer.Proxy(context.Background(), tgt, c) }()
				}
			}()
			e.addrs[kind][name] = addrPortOf(front.Addr())
		}
	}
	return e
}

func (e *benchEnv) transports() []transport {
	dialTCP := func(kind string) func(b *testing.B, svc string) net.Conn {
		return func(b *testing.B, svc string) net.Conn {
			c, err := net.Dial("tcp", e.addrs[kind][svc].String())
			if err != nil {
				b.Fatal(err)
			}
			return c
		}
	}
	return []transport{
		{"TCP", dialTCP("tcp")},
		{"TLS13", func(b *testing.B, svc string) net.Conn {
			c, err := tls.Dial("tcp", e.addrs["tls"][svc].String(), e.tlsConf)
			if err != nil {
				b.Fatal(err)
			}
			return c
		}},
		{"TLS13Proxied", dialTCP("tlsproxy")},
		{"HBONE", dialTCP("hbone")},
		{"HBONENoInline", dialTCP("hbonenoinline")},
	}
}

// proxyLoop accepts connections and splices each to a new upstream
// connection, carrying half-closes.
func proxyLoop(ln net.Listener, dial func() (net.Conn, error)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := dial()
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{})
			go func() { _, _ = io.Copy(up, c); closeWriteConn(up); close(done) }()
			_, _ = io.Copy(c, up)
			closeWriteConn(c)
			<-done
		}()
	}
}

func closeWriteConn(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// BenchmarkThroughput: one stream, 64 KiB writes, until the sink has it all.
func BenchmarkThroughput(b *testing.B) {
	e := newBenchEnv(b)
	for _, tr := range e.transports() {
		b.Run(tr.name, func(b *testing.B) {
			c := tr.dial(b, "sink")
			defer c.Close()
			buf := make([]byte, 64<<10)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(buf); err != nil {
					b.Fatal(err)
				}
			}
			closeWriteConn(c)
			if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
				b.Fatal(err)
			}
			// CPU time is reported besides wall time because on a shared
			// machine wall time mostly measures the neighbours.
			b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(b.N*len(buf))*(1<<20)/1e3, "cpu-µs/MiB")
		})
	}
}

// BenchmarkLatency1KiB: 1 KiB request, 1 KiB response on one connection;
// reports p50 and p99 in microseconds.
func BenchmarkLatency1KiB(b *testing.B) {
	e := newBenchEnv(b)
	for _, tr := range e.transports() {
		b.Run(tr.name, func(b *testing.B) {
			c := tr.dial(b, "echo")
			defer c.Close()
			req, resp := make([]byte, 1024), make([]byte, 1024)
			samples := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			cpu := cpuTime()
			for i := 0; i < b.N; i++ {
				start := time.Now()
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, resp); err != nil {
					b.Fatal(err)
				}
				samples = append(samples, time.Since(start))
			}
			b.StopTimer()
			b.ReportMetric(float64((cpuTime()-cpu).Nanoseconds())/float64(b.N)/1e3, "cpu-µs/op")
			slices.Sort(samples)
			b.ReportMetric(float64(samples[len(samples)/2].Nanoseconds())/1e3, "p50-µs")
			b.ReportMetric(float64(samples[len(samples)*99/100].Nanoseconds())/1e3, "p99-µs")
		})
	}
}

// BenchmarkNewTunnel: open a connection, exchange one byte, close. For HBONE
// the h2 pool is warm, so a tunnel is a new stream, not a new handshake;
// TLS-only pays a full handshake per connection.
func BenchmarkNewTunnel(b *testing.B) {
	e := newBenchEnv(b)
	for _, tr := range e.transports() {
		b.Run(tr.name, func(b *testing.B) {
			one := make([]byte, 1)
			warm := tr.dial(b, "echo")
			_, _ = warm.Write(one)
			_, _ = io.ReadFull(warm, one)
			warm.Close()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				c := tr.dial(b, "echo")
				if _, err := c.Write(one); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, one); err != nil {
					b.Fatal(err)
				}
				c.Close()
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "tunnels/s")
		})
	}
}

// BenchmarkIdleTunnelMemory opens 1,000 connections through each transport,
// each having carried one byte, and reports the growth of heap and stacks per
// connection. Everything runs in this process (client, both proxies for
// HBONE, the echo server), so TCP's figure is the floor the others include.
func BenchmarkIdleTunnelMemory(b *testing.B) {
	const n = 1000
	e := newBenchEnv(b)
	for _, tr := range e.transports() {
		b.Run(tr.name, func(b *testing.B) {
			var perTunnel, stackPerTunnel float64
			for i := 0; i < b.N; i++ {
				before, stackBefore := memInUse()
				conns := make([]net.Conn, 0, n)
				one := make([]byte, 1)
				for j := 0; j < n; j++ {
					c := tr.dial(b, "echo")
					if _, err := c.Write(one); err != nil {
						b.Fatal(err)
					}
					if _, err := io.ReadFull(c, one); err != nil {
						b.Fatal(err)
					}
					conns = append(conns, c)
				}
				time.Sleep(100 * time.Millisecond) // let every goroutine settle into its idle read
				after, stackAfter := memInUse()
				// Signed: the heap can shrink across the run (sync.Pool
				// victims from earlier benchmarks), which unsigned
				// arithmetic would turn into 1.8e19.
				perTunnel = float64(int64(after)-int64(before)) / n
				stackPerTunnel = float64(int64(stackAfter)-int64(stackBefore)) / n
				for _, c := range conns {
					c.Close()
				}
			}
			b.ReportMetric(perTunnel, "bytes/tunnel")
			// Of which goroutine stacks: the rest is heap.
			b.ReportMetric(stackPerTunnel, "stack-bytes/tunnel")
		})
	}
}

// cpuTime is the process's user+system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// memInUse returns heap+stack in use, and stack alone.
func memInUse() (total, stack uint64) {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse + ms.StackInuse, ms.StackInuse
}
