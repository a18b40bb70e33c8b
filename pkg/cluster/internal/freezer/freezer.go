// Package freezer thaws the frozen cgroups under a container that Docker
// cannot kill.
//
// Seen on this project's machines (cgroup v1, kind nodes running runc with
// the systemd cgroup driver): `docker rm -f` of a kind node kills the node's
// containerd and runc while an inner runc is creating a pod's container.
// runc freezes the new container's cgroup while it sets it up; killed, it
// never thaws it, so the container's `runc init` stays frozen (state D),
// the node's PID namespace never empties, and Docker answers "Could not kill
// running container …, cannot remove - tried to kill container, but did not
// receive an exit event" to every later delete. Thawing the cgroup lets the
// kill finish.
//
// A handful of file reads and writes, so no cgroup library is linked for it
// (opencontainers/cgroups would bring its systemd and dbus clients along).
package freezer

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Root is where the cgroup hierarchies are mounted.
const Root = "/sys/fs/cgroup"

// Thaw thaws every frozen cgroup at or below dir, in either hierarchy
// (v1: freezer.state FROZEN or FREEZING; v2: cgroup.freeze 1), and returns
// the directories it thawed. A dir that does not exist has nothing frozen.
func Thaw(dir string) ([]string, error) {
	var thawed []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if !d.IsDir() {
			return nil
		}
		ok, err := thawOne(path)
		if ok {
			thawed = append(thawed, path)
		}
		return err
	})
	if err != nil {
		return thawed, fmt.Errorf("thawing cgroups under %s: %w", dir, err)
	}
	return thawed, nil
}

// thawOne thaws the cgroup dir itself if it is frozen.
func thawOne(dir string) (bool, error) {
	for _, f := range []struct{ file, frozen, thawed string }{
		{"freezer.state", "FROZEN FREEZING", "THAWED"},
		{"cgroup.freeze", "1", "0"},
	} {
		p := filepath.Join(dir, f.file)
		b, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return false, err
		}
		if !strings.Contains(" "+f.frozen+" ", " "+strings.TrimSpace(string(b))+" ") {
			return false, nil
		}
		if err := os.WriteFile(p, []byte(f.thawed), 0); err != nil {
			return false, err
		}
		return true, nil
	}
	return false, nil
}

// Dirs returns the freezer cgroup directories of process pid under root
// (Root outside tests): the v1 freezer hierarchy's and the v2 unified one's,
// whichever the machine has.
func Dirs(root string, pid int) ([]string, error) {
	f, err := os.Open(filepath.Join("/proc", strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return nil, fmt.Errorf("reading cgroups of process %d: %w", pid, err)
	}
	defer f.Close()
	return parse(root, bufio.NewScanner(f))
}

// parse reads /proc/PID/cgroup lines ("ID:CONTROLLERS:PATH").
func parse(root string, s *bufio.Scanner) ([]string, error) {
	var out []string
	for s.Scan() {
		parts := strings.SplitN(s.Text(), ":", 3)
		if len(parts) != 3 || parts[2] == "/" {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
				out = append(out, filepath.Join(root, parts[2]))
			}
		case hasController(parts[1], "freezer"):
			out = append(out, filepath.Join(root, "freezer", parts[2]))
		}
	}
	return out, s.Err()
}

func hasController(list, name string) bool {
	for _, c := range strings.Split(list, ",") {
		if c == name {
			return true
		}
	}
	return false
}
