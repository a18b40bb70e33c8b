package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestLoggerLevels(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	l := NewLogger(&b, WithVerbosity(1))
	l.V(0).Info("zero")
	l.V(1).Infof("one %d", 1)
	l.V(2).Info("two")
	l.Warnf("careful %s", "now")
	l.Named("cluster1", 1).V(0).Info("kind says hi")
	l.Named("cluster1", 1).V(1).Info("hidden")
	got := b.String()
	want := "zero\none 1\nWARNING: careful now\n[cluster1] kind says hi\n"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	b.Reset()
	q := NewLogger(&b, WithQuiet(true))
	q.V(0).Info("hidden")
	q.Error("shown")
	if b.String() != "ERROR: shown\n" {
		t.Errorf("quiet: %q", b.String())
	}
}

func TestStatusPlainAndTerminal(t *testing.T) {
	t.Parallel()
	clock := time.Unix(0, 0)
	now := func() time.Time { clock = clock.Add(1500 * time.Millisecond); return clock }

	var plain bytes.Buffer
	s := NewStatus(NewLogger(&plain))
	s.now = now
	s.Start("Creating clusters")
	s.Start("Writing kubeconfigs")
	s.End(false)
	s.End(true) // no step: nothing
	want := " • Creating clusters ...\ndone: Creating clusters (1.5s)\n • Writing kubeconfigs ...\nfailed: Writing kubeconfigs (1.5s)\n"
	if plain.String() != want {
		t.Errorf("plain: got %q, want %q", plain.String(), want)
	}

	var tty bytes.Buffer
	s = NewStatus(NewLogger(&tty, WithColor(true)))
	s.now = now
	s.Start("Checking Docker")
	s.End(true)
	if got := tty.String(); !strings.HasPrefix(got, " • Checking Docker ...\r\x1b[K \x1b[32m✓\x1b[0m Checking Docker (1.5s)\n") {
		t.Errorf("terminal: %q", got)
	}

	var quiet bytes.Buffer
	s = NewStatus(NewLogger(&quiet, WithQuiet(true)))
	s.Start("x")
	s.End(false)
	if quiet.Len() != 0 {
		t.Errorf("quiet status printed %q", quiet.String())
	}
}
