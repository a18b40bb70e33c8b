package model

import (
	"net/netip"
	"testing"
)

func TestInferServiceCIDR(t *testing.T) {
	t.Parallel()
	for ip, want := range map[string]string{
		"10.96.0.1":         "10.96.0.0/12", // kubeadm's default range, exactly
		"10.0.0.1":          "10.0.0.0/12",  // an upper bound of testenv's /24
		"10.255.10.1":       "10.255.10.0/23",
		"172.20.0.1":        "172.20.0.0/14",
		"fd00:10:96::1":     "fd00:10:96::/108",
		"fd00:10:255:10::1": "fd00:10:255:10::/108",
	} {
		got := InferServiceCIDR(netip.MustParseAddr(ip))
		if got.String() != want {
			t.Errorf("InferServiceCIDR(%s) = %s, want %s", ip, got, want)
		}
		if !got.Contains(netip.MustParseAddr(ip)) || got.Masked() != got {
			t.Errorf("InferServiceCIDR(%s) = %s does not hold it", ip, got)
		}
	}
}
