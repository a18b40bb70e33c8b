// Package cli is meshctl's terminal output: a leveled logger (implementing
// kind's log.Logger, so the kind library logs through it too) and step
// status lines — ✓/✗ on a terminal, plain lines in CI logs.
package cli
