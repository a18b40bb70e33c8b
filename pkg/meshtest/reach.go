package meshtest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/onsi/gomega/types"

	"github.com/meshctl/meshctl/pkg/connect/check"
)

// Target is an address Reach connects to, with what the answer must say to
// prove it came from the intended workload.
type Target struct {
	What   string // for messages: "pod cluster2/ns/echo-1234"
	Host   string
	Port   int
	Expect string // a substring of the answer; "" takes any answer
}

// describe names the target and its address, once if they are the same.
func (t Target) describe() string {
	addr := hostPort(t.Host, t.Port)
	if t.What == "" || t.What == addr {
		return addr
	}
	return t.What + " at " + addr
}

// PodTarget is the echo pod itself, by its pod IP: the answer must come
// from this very pod.
func (e *Echo) PodTarget() Target {
	return Target{What: e.String(), Host: e.PodIP, Port: EchoPort,
		Expect: fmt.Sprintf("meshtest-echo cluster=%s pod=%s", e.Cluster.Name, e.Pod)}
}

// ServiceTarget is the echo's Service, by its cluster IP: the answer must
// come from an echo pod of the Service's cluster.
func (e *Echo) ServiceTarget() Target {
	return Target{What: fmt.Sprintf("service %s/%s/%s", e.Cluster.Name, e.Namespace, e.Name), Host: e.ServiceIP, Port: EchoServicePort,
		Expect: fmt.Sprintf("meshtest-echo cluster=%s ", e.Cluster.Name)}
}

// PodTargets are PodTarget at each of the pod's addresses: one per IP
// family on a dual-stack cluster.
func (e *Echo) PodTargets() []Target {
	return e.targets(e.PodTarget(), e.PodIPs)
}

// ServiceTargets are ServiceTarget at each of the Service's cluster IPs: one
// per IP family on a dual-stack cluster.
func (e *Echo) ServiceTargets() []Target {
	return e.targets(e.ServiceTarget(), e.ServiceIPs)
}

func (e *Echo) targets(t Target, ips []string) []Target {
	if len(ips) == 0 {
		return []Target{t}
	}
	out := make([]Target, len(ips))
	for i, ip := range ips {
		out[i] = t
		out[i].Host = ip
	}
	return out
}

// Address is any TCP address that answers an HTTP GET; any answer will do.
func Address(host string, port int) Target {
	return Target{What: hostPort(host, port), Host: host, Port: port}
}

// reachTimeout bounds one attempt: nc's connect and idle timeout
// (reachNCTimeout, in seconds), plus the exec round trip.
const (
	reachTimeout   = 15 * time.Second
	reachNCTimeout = 5
)

// Reach succeeds when the actual *Echo's pod sends an HTTP GET to target
// with nc (check.ProbeCommand, the probe `meshctl check` runs) and gets the
// answer target expects. One call is one attempt; to
// wait for a path to come up, poll it:
//
//	Eventually(from).WithTimeout(time.Minute).Should(meshtest.Reach(to.ServiceTarget()))
//
// and to check that a path stays closed:
//
//	Consistently(from).WithTimeout(10 * time.Second).ShouldNot(meshtest.Reach(to.PodTarget()))
func Reach(target Target) types.GomegaMatcher { return &reachMatcher{target: target} }

type reachMatcher struct {
	target Target
	from   string
	answer string
	stderr string
	err    error
}

func (m *reachMatcher) Match(actual any) (bool, error) {
	from, ok := actual.(*Echo)
	if !ok || from == nil {
		return false, fmt.Errorf("meshtest.Reach sends from a *meshtest.Echo (DeployEcho's), got %T", actual)
	}
	if m.target.Host == "" {
		return false, fmt.Errorf("meshtest.Reach: target %s has no address (is it Ready?)", m.target.What)
	}
	m.from = from.String()
	ctx, cancel := context.WithTimeout(context.Background(), reachTimeout)
	defer cancel()
	script := check.ProbeCommand(m.target.Host, m.target.Port, reachNCTimeout, check.HTTPRequest)
	m.answer, m.stderr, m.err = from.Exec(ctx, "sh", "-c", script)
	if m.err != nil {
		var exit *ExitError
		if !errors.As(m.err, &exit) {
			// Not an unreachable target, a broken exec: say so, not "no".
			return false, m.err
		}
		return false, nil
	}
	return strings.Contains(m.answer, m.target.Expect) && strings.TrimSpace(m.answer) != "", nil
}

func (m *reachMatcher) FailureMessage(any) string {
	msg := fmt.Sprintf("%s could not reach %s", m.from, m.target.describe())
	switch {
	case m.err != nil:
		msg += fmt.Sprintf(": nc failed (%v)", m.err)
		if s := strings.TrimSpace(m.stderr); s != "" {
			msg += ": " + s
		} else {
			msg += ": no answer (connection refused or timed out)"
		}
	case strings.TrimSpace(m.answer) == "":
		msg += ": the connection closed without an answer"
	default:
		msg += fmt.Sprintf(": something answered, but not it (want %q in the answer):\n%s", m.target.Expect, indent(m.answer))
	}
	return msg
}

func (m *reachMatcher) NegatedFailureMessage(any) string {
	return fmt.Sprintf("%s reached %s, and should not have; it answered:\n%s", m.from, m.target.describe(), indent(m.answer))
}

// MatchMayChangeInTheFuture lets Eventually and Consistently poll: a path
// that fails now may work once routes or endpoints are in place.
func (m *reachMatcher) MatchMayChangeInTheFuture(any) bool { return true }

func indent(s string) string {
	s = strings.TrimRight(s, "\n")
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
