// Package netnstest gives integration tests throwaway network namespaces.
// Every namespace is anonymous (no /var/run/netns entry) and disappears when
// the test closes its handle, so a failed test leaves nothing behind.
package netnstest

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netns"
)

// Require skips t unless it may create network namespaces: not under -short,
// and only as root.
func Require(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: skipped with -short")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and nftables rules")
	}
}

// New creates a network namespace with lo up and returns it as a file
// (usable as a CNI netns path via /proc/self/fd/N, or with setns).
func New(t testing.TB) *os.File {
	t.Helper()
	var f *os.File
	err := Do(nil, func() error {
		h, err := netns.New()
		if err != nil {
			return fmt.Errorf("creating netns: %w", err)
		}
		f = os.NewFile(uintptr(h), "netns")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := Do(f, func() error { return linkUp("lo") }); err != nil {
		t.Fatal(err)
	}
	return f
}

// Do runs fn on an OS thread inside ns (or in a thread that may unshare when
// ns is nil). The thread is never handed back to the runtime: the goroutine
// exits still locked, so Go discards the thread instead of reusing it in the
// wrong namespace.
func Do(ns *os.File, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if ns != nil {
			if err := netns.Set(netns.NsHandle(ns.Fd())); err != nil {
				errc <- fmt.Errorf("entering netns: %w", err)
				return
			}
		}
		errc <- fn()
	}()
	return <-errc
}
