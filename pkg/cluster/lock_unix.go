//go:build unix

package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// flockEnv takes env's lock on this host: an exclusive flock on a file
// under dir, which also holds the holder's description for the error a
// second process gets.
func flockEnv(dir string, me LockHolder) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("locking environment %q: %w", me.Env, err)
	}
	path := filepath.Join(dir, me.Env+".lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("locking environment %q: %w", me.Env, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		defer f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("locking environment %q (%s): %w", me.Env, path, err)
		}
		holder := LockHolder{Env: me.Env, Verb: "(unknown verb)", Host: me.Host}
		if b, err := os.ReadFile(path); err == nil {
			_ = json.Unmarshal(b, &holder)
		}
		// The kernel releases a flock when its holder dies: it is never
		// stale.
		return nil, &LockedError{Env: me.Env, Holder: holder}
	}
	if b, err := json.Marshal(me); err == nil {
		_ = f.Truncate(0)
		_, _ = f.WriteAt(b, 0)
	}
	return func() {
		_ = f.Truncate(0)
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
