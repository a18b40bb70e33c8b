// Package trace records, when the environment variable MESHCTL_TRACE names
// a file, what a run spends its time on: the start of each step (the status
// lines) and each Kubernetes API request with its duration, one line each,
// appended to that file. hack/noop-timing.sh puts a docker wrapper on PATH
// that appends each docker command (the kind library's included, which no
// in-process hook sees) to the same file, and sums both per step. Unset, a
// run pays one getenv.
//
// A line is "<start, µs since the epoch> <duration, µs> <what> <detail>",
// what being step, end, kube or docker.
package trace

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/tools/metrics"
)

// Env names the trace file.
const Env = "MESHCTL_TRACE"

var (
	once sync.Once
	mu   sync.Mutex
	out  *os.File // nil when tracing is off
)

func file() *os.File {
	once.Do(func() {
		path := os.Getenv(Env)
		if path == "" {
			return
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			fmt.Fprintf(os.Stderr, "WARNING: %s: %v (not tracing)\n", Env, err)
			return
		}
		out = f
		// client-go's hook sees every request of every client in the
		// process, Helm's included; it can be set once per process, and
		// nothing else in meshctl sets it.
		metrics.Register(metrics.RegisterOpts{RequestLatency: kubeLatency{}})
	})
	return out
}

// Start turns tracing on when MESHCTL_TRACE is set. Call it before the
// first Kubernetes client is made.
func Start() { file() }

// Enabled says whether MESHCTL_TRACE is set.
func Enabled() bool { return file() != nil }

// Step marks the start of a step: what follows, until the next step, is
// counted as its.
func Step(title string) { record(time.Now(), 0, "step", title) }

// End marks the end of the run.
func End() { record(time.Now(), 0, "end", "") }

func record(start time.Time, d time.Duration, what, detail string) {
	f := file()
	if f == nil {
		return
	}
	line := fmt.Sprintf("%d %d %s %s\n", start.UnixMicro(), d.Microseconds(), what, strings.ReplaceAll(detail, "\n", " "))
	mu.Lock()
	defer mu.Unlock()
	_, _ = f.WriteString(line)
}

type kubeLatency struct{}

// Observe records one request; the path names the resource, never its
// content (no secret goes to the trace).
func (kubeLatency) Observe(_ context.Context, verb string, u url.URL, latency time.Duration) {
	record(time.Now().Add(-latency), latency, "kube", verb+" "+u.Host+u.Path)
}
