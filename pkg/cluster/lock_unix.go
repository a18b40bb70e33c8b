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

// The kind network guard: kind makes the shared docker network "kind" before
// it makes a cluster's containers, and down removes that network once no
// kind cluster is left. Between the two the network has no container, so a
// down of the last cluster of one environment could remove the network that
// another environment's up has just made, and that up's `docker run --net
// kind` would fail. Creators hold a shared flock on one file while kind
// creates containers; down removes the network only if it gets the lock
// exclusively at once, and otherwise leaves the network to the creator.
const networkGuard = "kind-network.lock"

// holdNetwork takes the guard shared, waiting for a down that is removing
// the network (a moment) to finish.
func holdNetwork(dir string) (func(), error) {
	f, err := openGuard(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s shared: %w", f.Name(), err)
	}
	return func() { f.Close() }, nil // closing the file drops the flock
}

// claimNetwork takes the guard exclusively without waiting; ok is false
// while some up is creating containers on the network.
func claimNetwork(dir string) (release func(), ok bool, err error) {
	f, err := openGuard(dir)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("locking %s: %w", f.Name(), err)
	}
	return func() { f.Close() }, true, nil
}

func openGuard(dir string) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("kind network guard: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, networkGuard), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("kind network guard: %w", err)
	}
	return f, nil
}
