// Command kindnetd is a minimal stand-in for kind's kindnetd (docker.io/kindest/kindnetd),
// whose source is not on the Go module proxy. It runs with the unchanged
// /kind/manifests/default-cni.yaml of kind v0.33 (hostNetwork, NET_ADMIN, env HOST_IP,
// POD_IP, POD_SUBNET) and does what a single-network test cluster needs:
//   - writes /etc/cni/net.d/10-kindnet.conflist (ptp + host-local with this node's
//     podCIDRs, portmap) once the node has a podCIDR;
//   - keeps a route to every other node's podCIDRs via that node's InternalIP;
//   - masquerades pod traffic leaving the cluster pod subnet (iptables, nat table).
//
// No NetworkPolicy, no NRI. Good enough for kind clusters on one docker network.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

const cniConfPath = "/etc/cni/net.d/10-kindnet.conflist"

func main() {
	hostIP := os.Getenv("HOST_IP")
	podSubnets := splitCIDRs(os.Getenv("POD_SUBNET"))
	if hostIP == "" {
		log.Fatal("HOST_IP is not set")
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		log.Fatalf("in-cluster config: %v", err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	log.Printf("meshctl kindnetd: host %s, pod subnets %v", hostIP, podSubnets)
	for {
		if err := reconcile(context.Background(), cs, hostIP, podSubnets); err != nil {
			log.Printf("reconcile: %v", err)
			time.Sleep(2 * time.Second)
			continue
		}
		time.Sleep(10 * time.Second)
	}
}

func splitCIDRs(s string) []*net.IPNet {
	var out []*net.IPNet
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		_, n, err := net.ParseCIDR(p)
		if err != nil {
			log.Fatalf("bad POD_SUBNET %q: %v", p, err)
		}
		out = append(out, n)
	}
	return out
}

func nodeIPs(n *v1.Node) []string {
	var ips []string
	for _, a := range n.Status.Addresses {
		if a.Type == v1.NodeInternalIP {
			ips = append(ips, a.Address)
		}
	}
	return ips
}

func reconcile(ctx context.Context, cs kubernetes.Interface, hostIP string, podSubnets []*net.IPNet) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	for i := range nodes.Items {
		n := &nodes.Items[i]
		cidrs := n.Spec.PodCIDRs
		if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
			cidrs = []string{n.Spec.PodCIDR}
		}
		ips := nodeIPs(n)
		self := false
		for _, ip := range ips {
			if ip == hostIP {
				self = true
			}
		}
		if self {
			if len(cidrs) == 0 {
				return fmt.Errorf("node %s has no podCIDR yet", n.Name)
			}
			if err := writeCNIConfig(cidrs); err != nil {
				return err
			}
			continue
		}
		for _, c := range cidrs {
			_, dst, err := net.ParseCIDR(c)
			if err != nil {
				continue
			}
			for _, ip := range ips {
				gw := net.ParseIP(ip)
				if gw == nil || (gw.To4() == nil) != (dst.IP.To4() == nil) {
					continue
				}
				r := netlink.Route{Dst: dst, Gw: gw}
				if err := netlink.RouteReplace(&r); err != nil {
					log.Printf("route %s via %s (node %s): %v", dst, gw, n.Name, err)
				}
			}
		}
	}
	return ensureMasquerade(podSubnets)
}

func writeCNIConfig(cidrs []string) error {
	mtu := 1500
	if l, err := defaultRouteLink(); err == nil {
		mtu = l.Attrs().MTU
	}
	var ranges [][]map[string]string
	routes := []map[string]string{}
	for _, c := range cidrs {
		ranges = append(ranges, []map[string]string{{"subnet": c}})
		if strings.Contains(c, ":") {
			routes = append(routes, map[string]string{"dst": "::/0"})
		} else {
			routes = append(routes, map[string]string{"dst": "0.0.0.0/0"})
		}
	}
	conf := map[string]any{
		"cniVersion": "0.3.1",
		"name":       "kindnet",
		"plugins": []any{
			map[string]any{
				"type":   "ptp",
				"ipMasq": false,
				"mtu":    mtu,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": "/run/cni-ipam-state",
					"routes":  routes,
					"ranges":  ranges,
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}},
		},
	}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	if old, err := os.ReadFile(cniConfPath); err == nil && bytes.Equal(old, b) {
		return nil
	}
	tmp := filepath.Join(filepath.Dir(cniConfPath), ".10-kindnet.conflist.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	log.Printf("writing %s for %v", cniConfPath, cidrs)
	return os.Rename(tmp, cniConfPath)
}

func defaultRouteLink() (netlink.Link, error) {
	routes, err := netlink.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, err
	}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
			return netlink.LinkByIndex(r.LinkIndex)
		}
	}
	return nil, fmt.Errorf("no default route")
}

// ensureMasquerade: traffic from the pod subnet to outside it is SNATed to the node.
func ensureMasquerade(podSubnets []*net.IPNet) error {
	for _, s := range podSubnets {
		bin := "iptables"
		if s.IP.To4() == nil {
			bin = "ip6tables"
		}
		const chain = "KIND-MASQ-AGENT"
		_ = exec.Command(bin, "-w", "5", "-t", "nat", "-N", chain).Run() // exists already: fine
		rules := [][]string{
			{"POSTROUTING", "-m", "addrtype", "!", "--dst-type", "LOCAL", "-s", s.String(), "-j", chain},
			{chain, "-d", s.String(), "-j", "RETURN"},
			{chain, "-j", "MASQUERADE"},
		}
		for _, r := range rules {
			check := append([]string{"-w", "5", "-t", "nat", "-C"}, r...)
			if exec.Command(bin, check...).Run() == nil {
				continue
			}
			add := append([]string{"-w", "5", "-t", "nat", "-A"}, r...)
			if out, err := exec.Command(bin, add...).CombinedOutput(); err != nil {
				return fmt.Errorf("%s %v: %v: %s", bin, add, err, out)
			}
		}
	}
	return nil
}
