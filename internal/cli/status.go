package cli

import (
	"fmt"
	"time"

	"sigs.k8s.io/kind/pkg/log"

	"github.com/meshctl/meshctl/internal/trace"
)

// Status prints one line per step of a long operation. On a terminal a step
// shows "• step ..." while it runs and is rewritten in place as a green ✓ or
// a red ✗; elsewhere (CI logs, pipes) each step ends as a plain line that
// greps well: "done: step (1.2s)" or "failed: step (1.2s)".
type Status struct {
	logger  log.Logger
	step    string
	started time.Time
	now     func() time.Time
}

// colorer is implemented by loggers that write to a terminal.
type colorer interface{ ColorEnabled() bool }

// rawWriter is implemented by loggers that can write a partial line.
type rawWriter interface{ Raw(string) }

// NewStatus returns a Status that prints through logger at level 0, so -q
// silences it.
func NewStatus(logger log.Logger) *Status {
	return &Status{logger: logger, now: time.Now}
}

// color reports whether steps may be drawn in place. With -v, other lines
// come between a step's start and end, so each gets a line of its own.
func (s *Status) color() bool {
	c, ok := s.logger.(colorer)
	_, raw := s.logger.(rawWriter)
	return ok && raw && c.ColorEnabled() && !s.logger.V(1).Enabled()
}

// Start begins a step, ending the previous one as successful.
func (s *Status) Start(step string) {
	s.End(true)
	s.step, s.started = step, s.now()
	trace.Step(step)
	if !s.logger.V(0).Enabled() {
		return
	}
	if s.color() {
		s.logger.(rawWriter).Raw(fmt.Sprintf(" • %s ...", step))
		return
	}
	s.logger.V(0).Infof(" • %s ...", step)
}

// End finishes the current step, if any.
func (s *Status) End(ok bool) {
	if s.step == "" {
		return
	}
	step, took := s.step, s.now().Sub(s.started).Round(100*time.Millisecond)
	s.step = ""
	if !s.logger.V(0).Enabled() {
		return
	}
	switch {
	case s.color() && ok:
		s.logger.(rawWriter).Raw(fmt.Sprintf("\r\x1b[K \x1b[32m✓\x1b[0m %s (%s)\n", step, took))
	case s.color():
		s.logger.(rawWriter).Raw(fmt.Sprintf("\r\x1b[K \x1b[31m✗\x1b[0m %s (%s)\n", step, took))
	case ok:
		s.logger.V(0).Infof("done: %s (%s)", step, took)
	default:
		s.logger.V(0).Infof("failed: %s (%s)", step, took)
	}
}
