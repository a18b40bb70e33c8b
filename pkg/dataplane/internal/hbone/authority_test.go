package hbone

import (
	"net/netip"
	"testing"
)

func TestParseAuthority(t *testing.T) {
	t.Parallel()
	for _, good := range []string{"10.0.0.1:80", "[fd00::1]:8080", "127.0.0.1:65535"} {
		ap, err := parseAuthority(good)
		if err != nil || ap.String() != good {
			t.Errorf("parseAuthority(%q) = %v, %v", good, ap, err)
		}
	}
	for _, bad := range []string{
		"", "10.0.0.1", "10.0.0.1:", "10.0.0.1:0", "10.0.0.1:65536", "10.0.0.1:+80",
		"10.0.0.1:080", "example.com:80", "fd00::1:80", "[fd00::1]", "[fe80::1%eth0]:80",
		"[::ffff:10.0.0.1]:80", "[10.0.0.1]:80", "010.0.0.1:80", "10.0.0.1:80 ", " 10.0.0.1:80",
		"[FD00::1]:80", "10.0.0.1:80/x",
	} {
		if ap, err := parseAuthority(bad); err == nil {
			t.Errorf("parseAuthority(%q) = %v, want error", bad, ap)
		}
	}
}

func FuzzParseAuthority(f *testing.F) {
	for _, s := range []string{"10.0.0.1:80", "[fd00::1]:8080", "[fe80::1%eth0]:80", "a:1", "1.2.3.4:0", "[::ffff:1.2.3.4]:5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ap, err := parseAuthority(s)
		if err != nil {
			return
		}
		// Whatever is accepted is one canonical literal ip:port that round-trips.
		if ap.String() != s || ap.Port() == 0 || ap.Addr().Zone() != "" || ap.Addr().Is4In6() {
			t.Fatalf("accepted %q as %v", s, ap)
		}
		again, err := netip.ParseAddrPort(s)
		if err != nil || again != ap {
			t.Fatalf("netip disagrees on %q: %v, %v", s, again, err)
		}
	})
}

func TestForwardedFor(t *testing.T) {
	t.Parallel()
	if got := forwardedFor(netip.MustParseAddr("10.1.2.3")); got != `for="10.1.2.3"` {
		t.Errorf("v4: %s", got)
	}
	if got := forwardedFor(netip.MustParseAddr("fd00::1")); got != `for="[fd00::1]"` {
		t.Errorf("v6: %s", got)
	}
}
