package nodeagent

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// errNetnsNotFound: no process of the pod is running (yet, or any more).
var errNetnsNotFound = errors.New("no process of the pod found in procfs")

// findNetns finds the netns of a pod that is already running, for pods
// enrolled after their sandbox was created (the CNI plugin never saw them
// as meshed). Like upstream, it looks for a process whose cgroup path
// names the pod's UID, as the kubelet's cgroup drivers do ("pod<uid>" with
// cgroupfs, "pod<uid_with_underscores>" with systemd), and uses that
// process's netns.
func findNetns(procRoot, uid string) (string, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return "", fmt.Errorf("listing %s: %w", procRoot, err)
	}
	needles := []string{"pod" + uid, "pod" + strings.ReplaceAll(uid, "-", "_")}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue // not a process
		}
		if inPod(filepath.Join(procRoot, e.Name(), "cgroup"), needles) {
			return filepath.Join(procRoot, e.Name(), "ns", "net"), nil
		}
	}
	return "", fmt.Errorf("pod %s: %w", uid, errNetnsNotFound)
}

func inPod(cgroupFile string, needles []string) bool {
	f, err := os.Open(cgroupFile)
	if err != nil {
		return false // the process exited meanwhile
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for _, n := range needles {
			if strings.Contains(sc.Text(), n) {
				return true
			}
		}
	}
	return false
}
