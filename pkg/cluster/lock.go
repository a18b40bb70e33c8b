package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// An environment's lock keeps two mutating meshctl runs (up, down, connect,
// install, uninstall) off one environment: without it, the loser of two
// `up`s rolls back — deletes — the clusters the winner is creating.
//
// It has two parts, taken in this order:
//
//   - a flock(2) on <artifacts>/.locks/<env>.lock: the fast path on one
//     host. The kernel drops it when its holder dies, so it is never stale,
//     and it works without Docker (an environment of existing clusters).
//   - a Docker container named meshctl-lock-<env>, created (never started)
//     from a tiny local image. Processes in different containers that share
//     one Docker socket share neither a filesystem nor a PID namespace, so
//     no host file can serialise them; the Docker engine can: a container
//     name is unique and its creation atomic (a second create fails with
//     Conflict), which a network is not (older engines allow duplicate
//     network names; kind removes duplicates for that reason) and a volume
//     is not (creating an existing volume succeeds). Its labels say who
//     holds it.
//
// A Docker lock outlives a holder killed with SIGKILL, so a holder is
// checked: one on this host and PID namespace is gone when its PID is, or
// when the PID now names a process started at another time; one on this
// host name with another boot ID was lost to a reboot; any other (another
// container's) is taken as stale once it is older than MaxLockAge, since
// Docker cannot update a container's labels for a holder to refresh them.
// The error message names the holder and the command that removes the lock.

// MaxLockAge is how long a lock whose holder cannot be checked (it runs in
// another container or on another host) is honoured: longer than any up.
const MaxLockAge = 2 * time.Hour

// LockImage is the image the lock containers are created from: one empty
// layer, imported locally, so taking a lock never pulls.
const LockImage = "meshctl-lock:1"

// LockContainer is the name of the container that holds env's lock.
func LockContainer(env string) string { return "meshctl-lock-" + env }

const lockLabel = "io.meshctl.lock."

// LockHolder is who holds an environment's lock.
type LockHolder struct {
	Env   string    `json:"env"`
	Verb  string    `json:"verb"`
	PID   int       `json:"pid"`
	Host  string    `json:"host"`
	Since time.Time `json:"since"`
	// BootID, PIDNS and Start tell whether PID still names the holder:
	// the same boot and PID namespace, and a process started at the same
	// time (a reused PID names another process).
	BootID string `json:"bootID,omitempty"`
	PIDNS  string `json:"pidNS,omitempty"`
	Start  string `json:"start,omitempty"`
}

func (h LockHolder) String() string {
	return fmt.Sprintf("meshctl %s (pid %d on host %s since %s)", h.Verb, h.PID, h.Host, h.Since.Local().Format(time.RFC3339))
}

// LockedError is returned when another process holds the environment's lock.
type LockedError struct {
	Env    string
	Holder LockHolder
	// Remove is the command that removes the lock, when it is stale;
	// empty when the holder is known to be alive.
	Remove string
}

func (e *LockedError) Error() string {
	if e.Remove == "" {
		return fmt.Sprintf("environment %q is locked by %s; wait for it to finish (the lock goes when it exits)", e.Env, e.Holder)
	}
	return fmt.Sprintf("environment %q is locked by %s; wait, or remove a stale lock with %s", e.Env, e.Holder, e.Remove)
}

// lockKey marks a context whose caller holds env's lock, so that calls made
// under it (mesh's Up calls the Provider's Up) do not take it again.
type lockKey struct{ env string }

// LockEnv takes env's lock for verb ("up", "down", …), or returns a
// *LockedError naming the holder. It does not wait: a second run is told at
// once. The context it returns carries the lock, so Provider methods given
// it do not take it again; release it with the returned function.
func (p *Provider) LockEnv(ctx context.Context, env, verb string) (context.Context, func(), error) {
	return p.lockEnv(ctx, env, verb, true)
}

// lockEnv is LockEnv; withDocker false takes the host's lock alone, for an
// environment of existing clusters only, which must not need Docker.
func (p *Provider) lockEnv(ctx context.Context, env, verb string, withDocker bool) (context.Context, func(), error) {
	if ctx.Value(lockKey{env}) != nil {
		return ctx, func() {}, nil
	}
	// The name becomes a file name and a container name.
	if msgs := validation.IsDNS1123Label(env); len(msgs) > 0 {
		return ctx, nil, fmt.Errorf("environment name %q: %s", env, strings.Join(msgs, "; "))
	}
	me := p.self(env, verb)
	unflock, err := flockEnv(p.locksDir(), me)
	if err != nil {
		return ctx, nil, err
	}
	undocker := func() {}
	if withDocker {
		undocker, err = p.dockerLock(ctx, me)
	}
	if err != nil {
		unflock()
		return ctx, nil, err
	}
	// Forgotten before the lock is released: another process may change
	// the environment from then on.
	unsnap := p.snap.hold()
	return context.WithValue(ctx, lockKey{env}, true), func() { unsnap(); undocker(); unflock() }, nil
}

// locksDir holds the host's lock files: environments' and the kind network
// guard.
func (p *Provider) locksDir() string { return filepath.Join(p.artifacts, ".locks") }

// self describes this process as a lock holder.
func (p *Provider) self(env, verb string) LockHolder {
	host, _ := os.Hostname()
	h := LockHolder{Env: env, Verb: verb, PID: os.Getpid(), Host: host, Since: p.now().UTC().Truncate(time.Second)}
	if b, err := os.ReadFile("/proc/sys/kernel/random/boot_id"); err == nil {
		h.BootID = strings.TrimSpace(string(b))
	}
	h.PIDNS, _ = os.Readlink("/proc/self/ns/pid")
	h.Start = procStart(h.PID)
	return h
}

// procStart is a process's start time in clock ticks since boot (field 22
// of /proc/<pid>/stat), or "" if there is no such process.
func procStart(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	// The command name (field 2) may hold spaces: count from its end.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		f := strings.Fields(s[i+1:])
		if len(f) > 19 {
			return f[19]
		}
	}
	return ""
}

// stale says why holder no longer holds its lock, or "" if it may.
func stale(holder, me LockHolder, now time.Time) string {
	if holder.BootID != "" && holder.BootID == me.BootID && holder.PIDNS != "" && holder.PIDNS == me.PIDNS {
		cur := procStart(holder.PID)
		switch {
		case cur == "":
			return fmt.Sprintf("pid %d is gone", holder.PID)
		case holder.Start != "" && cur != holder.Start:
			return fmt.Sprintf("pid %d is gone (the pid now names another process)", holder.PID)
		case holder.Start != "":
			return ""
		}
		// Its start time unknown: only its age can tell.
	}
	if holder.Host == me.Host && holder.BootID != "" && me.BootID != "" && holder.BootID != me.BootID {
		return fmt.Sprintf("host %s has rebooted since", holder.Host)
	}
	if age := now.Sub(holder.Since); age > MaxLockAge {
		return fmt.Sprintf("taken %s ago, more than %s", age.Round(time.Minute), MaxLockAge)
	}
	return ""
}

func (h LockHolder) labels() []string {
	var out []string
	for k, v := range map[string]string{
		"env": h.Env, "verb": h.Verb, "pid": strconv.Itoa(h.PID), "host": h.Host, "since": h.Since.Format(time.RFC3339),
		"boot-id": h.BootID, "pid-ns": h.PIDNS, "start": h.Start,
	} {
		out = append(out, "--label", lockLabel+k+"="+v)
	}
	return out
}

func holderFromLabels(l map[string]string) LockHolder {
	pid, _ := strconv.Atoi(l[lockLabel+"pid"])
	since, _ := time.Parse(time.RFC3339, l[lockLabel+"since"])
	return LockHolder{
		Env: l[lockLabel+"env"], Verb: l[lockLabel+"verb"], PID: pid, Host: l[lockLabel+"host"], Since: since,
		BootID: l[lockLabel+"boot-id"], PIDNS: l[lockLabel+"pid-ns"], Start: l[lockLabel+"start"],
	}
}

var errNoLock = errors.New("no lock container")

// dockerLock creates env's lock container, removing a stale one first.
func (p *Provider) dockerLock(ctx context.Context, me LockHolder) (func(), error) {
	name := LockContainer(me.Env)
	if err := p.ensureLockImage(ctx); err != nil {
		if _, ierr := p.docker.Run(ctx, "info", "--format", "{{.ServerVersion}}"); ierr != nil {
			// No Docker engine: no other container can reach this
			// environment through one, and the flock holds on this host.
			p.logger.V(1).Infof("environment %q: no Docker engine, locked on this host only", me.Env)
			return func() {}, nil
		}
		return nil, fmt.Errorf("locking environment %q: %w", me.Env, err)
	}
	// A few rounds: a stale lock removed here may be taken by another
	// process before this one creates its own.
	for range 3 {
		args := append([]string{"container", "create", "--name", name}, me.labels()...)
		out, err := p.docker.Run(ctx, append(args, LockImage, "/meshctl-lock")...)
		if err == nil {
			id := strings.TrimSpace(string(out))
			return func() {
				// By ID: a lock someone else took after this one was
				// (wrongly) judged stale is theirs.
				if _, err := p.docker.Run(context.Background(), "container", "rm", "--force", id); err != nil {
					p.logger.Warnf("environment %q: releasing the lock: %v (remove it with `docker rm %s`)", me.Env, err, name)
				}
			}, nil
		}
		if !isConflict(err) {
			return nil, fmt.Errorf("locking environment %q (docker container %s): %w", me.Env, name, err)
		}
		id, holder, err := p.lockHolder(ctx, name)
		if errors.Is(err, errNoLock) {
			continue // released meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("locking environment %q: %w", me.Env, err)
		}
		why := stale(holder, me, p.now())
		if why == "" {
			return nil, &LockedError{Env: me.Env, Holder: holder, Remove: fmt.Sprintf("`docker rm %s`", name)}
		}
		p.logger.Warnf("environment %q: removing the stale lock of %s: %s", me.Env, holder, why)
		_, err = p.docker.Run(ctx, "container", "rm", "--force", id)
		switch {
		case err == nil, isNoSuchContainer(err):
		case isRemovalInProgress(err):
			// Another run judged it stale too (two runs after a killed
			// one) and is removing it: once it is gone, both race to
			// create theirs as usual and the loser is told who won.
			if err := p.waitLockGone(ctx, id); err != nil {
				return nil, fmt.Errorf("removing the stale lock %s of environment %q: %w", name, me.Env, err)
			}
		default:
			return nil, fmt.Errorf("removing the stale lock %s of environment %q: %w", name, me.Env, err)
		}
	}
	return nil, fmt.Errorf("locking environment %q: the lock container %s keeps changing hands; retry", me.Env, name)
}

// lockHolder reads the lock container's ID and holder.
func (p *Provider) lockHolder(ctx context.Context, name string) (string, LockHolder, error) {
	out, err := p.docker.Run(ctx, "container", "inspect", "--format", "{{.Id}} {{json .Config.Labels}}", name)
	if err != nil {
		if isNoSuchContainer(err) {
			return "", LockHolder{}, errNoLock
		}
		return "", LockHolder{}, fmt.Errorf("reading lock %s: %w", name, err)
	}
	id, js, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	var labels map[string]string
	if err := json.Unmarshal([]byte(js), &labels); err != nil {
		return "", LockHolder{}, fmt.Errorf("reading lock %s: labels %q: %w", name, js, err)
	}
	return id, holderFromLabels(labels), nil
}

// ensureLockImage imports LockImage from an empty tar archive unless it is
// there: an image nothing runs, which never needs a registry.
func (p *Provider) ensureLockImage(ctx context.Context) error {
	if _, err := p.docker.Run(ctx, "image", "inspect", "--format", "{{.Id}}", LockImage); err == nil {
		return nil
	}
	f, err := os.CreateTemp("", "meshctl-lock-*.tar")
	if err != nil {
		return fmt.Errorf("creating the lock image: %w", err)
	}
	defer os.Remove(f.Name())
	// An empty tar archive is two zero blocks.
	_, err = f.Write(make([]byte, 1024))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("creating the lock image: %w", err)
	}
	if _, err := p.docker.Run(ctx, "image", "import", "--message", "meshctl environment lock", f.Name(), LockImage); err != nil {
		return fmt.Errorf("creating the lock image: %w", err)
	}
	return nil
}

func isConflict(err error) bool {
	return strings.Contains(err.Error(), "Conflict") || strings.Contains(err.Error(), "is already in use")
}

// isRemovalInProgress: Docker is removing the container for another client.
func isRemovalInProgress(err error) bool {
	return strings.Contains(err.Error(), "is already in progress")
}

// lockRemovalWait bounds how long a run waits for another's removal of a
// stale lock container: an empty container goes in well under a second.
const lockRemovalWait = 30 * time.Second

// waitLockGone waits until the lock container id no longer exists.
func (p *Provider) waitLockGone(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, lockRemovalWait)
	defer cancel()
	for {
		_, err := p.docker.Run(ctx, "container", "inspect", "--format", "{{.Id}}", id)
		if err != nil && isNoSuchContainer(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("container %s is still there after %s: %w", id, lockRemovalWait, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func isNoSuchContainer(err error) bool {
	return strings.Contains(err.Error(), "No such container") || strings.Contains(err.Error(), "No such object")
}
