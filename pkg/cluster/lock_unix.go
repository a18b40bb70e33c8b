//go:build unix

package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
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
		holder := readHolder(path, me)
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

// readHolder reads who holds the flock on path. The holder writes itself
// there just after taking the lock, so a loser of a race may find the file
// empty or half-written: it reads again for a moment before it gives up
// and names an unknown holder.
func readHolder(path string, me LockHolder) LockHolder {
	for range 100 {
		var h LockHolder
		if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &h) == nil && h.PID != 0 {
			return h
		}
		time.Sleep(10 * time.Millisecond)
	}
	return LockHolder{Env: me.Env, Verb: "(unknown verb)", Host: me.Host}
}
