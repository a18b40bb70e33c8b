package cli

import (
	"fmt"
	"io"
	"strings"
	"sync"

	"sigs.k8s.io/kind/pkg/log"
)

// Logger writes leveled messages to one writer. Level 0 is what a person
// wants to see by default; -v N shows more; quiet hides all but warnings and
// errors. It is safe for concurrent use: clusters are created in parallel.
type Logger struct {
	mu        sync.Mutex
	w         io.Writer
	verbosity log.Level
	quiet     bool
	color     bool
}

var _ log.Logger = (*Logger)(nil)

// LoggerOption configures a Logger.
type LoggerOption func(*Logger)

// WithVerbosity shows messages up to level v.
func WithVerbosity(v int) LoggerOption { return func(l *Logger) { l.verbosity = log.Level(v) } }

// WithQuiet hides informational messages, keeping warnings and errors.
func WithQuiet(q bool) LoggerOption { return func(l *Logger) { l.quiet = q } }

// WithColor enables terminal colors and in-place status lines.
func WithColor(c bool) LoggerOption { return func(l *Logger) { l.color = c } }

// NewLogger returns a Logger writing to w.
func NewLogger(w io.Writer, opts ...LoggerOption) *Logger {
	l := &Logger{w: w}
	for _, o := range opts {
		o(l)
	}
	return l
}

// Named returns a logger that prefixes every line with "[name] " and shifts
// levels by shift, so that a library's progress (kind's, for each of several
// clusters created at once) shows only with -v.
func (l *Logger) Named(name string, shift int) log.Logger {
	return &shifted{l: l, prefix: "[" + name + "] ", shift: log.Level(shift)}
}

// ColorEnabled reports whether status lines may use color and rewrite the line.
func (l *Logger) ColorEnabled() bool { return l.color }

func (l *Logger) write(prefix, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !strings.HasSuffix(msg, "\n") {
		msg += "\n"
	}
	fmt.Fprint(l.w, prefix+msg)
}

// Raw writes s as it is: status lines manage their own line endings.
func (l *Logger) Raw(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprint(l.w, s)
}

func (l *Logger) Warn(message string) { l.write("WARNING: ", message) }
func (l *Logger) Warnf(format string, args ...any) {
	l.Warn(fmt.Sprintf(format, args...))
}
func (l *Logger) Error(message string) { l.write("ERROR: ", message) }
func (l *Logger) Errorf(format string, args ...any) {
	l.Error(fmt.Sprintf(format, args...))
}

// V returns the logger for level v: a no-op when v is not shown.
func (l *Logger) V(v log.Level) log.InfoLogger {
	return info{l: l, enabled: !l.quiet && v <= l.verbosity}
}

type info struct {
	l       *Logger
	prefix  string
	enabled bool
}

func (i info) Enabled() bool { return i.enabled }
func (i info) Info(message string) {
	if i.enabled {
		i.l.write(i.prefix, message)
	}
}
func (i info) Infof(format string, args ...any) {
	if i.enabled {
		i.l.write(i.prefix, fmt.Sprintf(format, args...))
	}
}

type shifted struct {
	l      *Logger
	prefix string
	shift  log.Level
}

func (s *shifted) Warn(m string)             { s.l.Warn(s.prefix + m) }
func (s *shifted) Warnf(f string, a ...any)  { s.l.Warn(s.prefix + fmt.Sprintf(f, a...)) }
func (s *shifted) Error(m string)            { s.l.Error(s.prefix + m) }
func (s *shifted) Errorf(f string, a ...any) { s.l.Error(s.prefix + fmt.Sprintf(f, a...)) }
func (s *shifted) V(v log.Level) log.InfoLogger {
	in := s.l.V(v + s.shift).(info)
	in.prefix = s.prefix
	return in
}
