package nodeagent

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshctl/meshctl/pkg/dataplane/internal/netnstest"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/redirect"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/testutil"
	"github.com/meshctl/meshctl/pkg/dataplane/internal/zds"
)

// The real nftables rules in a real pod netns: installed on add, kept
// through an agent restart, removed when the pod is deleted.
func TestIntegrationAgentRulesInRealNetns(t *testing.T) {
	netnstest.Require(t)
	podNetns := netnstest.New(t)
	path := fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), podNetns.Fd())
	rules := redirect.New()
	installed := func() bool {
		ok, err := rules.Installed(podNetns)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	h := newHarness(t, namespace("app", true), pod("app", "web", node))
	stop := h.start(WithRedirector(rules))
	p := h.proxy()
	p.next(t) // SnapshotSent
	if code, msg := h.post(addEvent("app", "web", path)); code != http.StatusOK {
		t.Fatalf("add: %d %s", code, msg)
	}
	if ev := p.next(t); ev.Kind != zds.KindAdd || ev.UID != "uid-web" {
		t.Fatalf("proxy got %+v", ev)
	}
	if !installed() {
		t.Fatal("rules not installed in the pod netns after add")
	}

	stop()
	if !installed() {
		t.Fatal("agent exit removed the rules of a running pod")
	}
	h.start(WithRedirector(rules))
	if !installed() {
		t.Fatal("rules missing after agent restart")
	}
	p2 := h.proxy()
	if ev := p2.next(t); ev.Kind != zds.KindAdd || ev.UID != "uid-web" {
		t.Fatalf("snapshot after agent restart: %+v", ev)
	}
	p2.next(t) // SnapshotSent

	if err := h.client.CoreV1().Pods("app").Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := p2.next(t); ev.Kind != zds.KindDel {
		t.Fatalf("after delete proxy got %+v", ev)
	}
	testutil.Eventually(t, "rules removed after pod delete", func() bool { return !installed() })
}
