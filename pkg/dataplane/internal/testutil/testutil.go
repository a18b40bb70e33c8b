// Package testutil holds helpers the dataplane's tests share.
package testutil

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Eventually polls cond until it holds, failing t after 5 seconds: long
// enough for a loaded CI machine, short enough to fail fast.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Gauge reads the value of the gauge name from reg; -1 when it is absent.
func Gauge(t testing.TB, reg prometheus.Gatherer, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}
