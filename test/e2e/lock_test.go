package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/meshctl/meshctl/pkg/cluster"
)

// Two `meshctl up` on one environment, each with an artifacts directory of
// its own — as two containers sharing the host's Docker socket but not its
// filesystem are — so that only the Docker lock container can keep them
// apart. Before the lock, the loser's rollback deleted the clusters the
// winner was creating.
var _ = Describe("two meshctl runs on one environment", Ordered, func() {
	lockEnv := env + "-lock"
	var dirs [2]string

	run := func(dir string, args ...string) (string, error) {
		var out bytes.Buffer
		cmd := exec.Command(suite.meshctl, append(args, "--artifacts", dir)...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		GinkgoWriter.Printf("$ meshctl %s (artifacts %s)\n%s", strings.Join(args, " "), dir, out.String())
		return out.String(), err
	}

	BeforeAll(func() {
		for i := range dirs {
			dirs[i] = filepath.Join(suite.artifacts, fmt.Sprintf("lock-%d", i))
			Expect(os.MkdirAll(dirs[i], 0o755)).To(Succeed())
		}
		DeferCleanup(func() {
			if keep() {
				return
			}
			_, _ = run(dirs[0], "down", "--env", lockEnv)
			_, _ = run(dirs[1], "down", "--env", lockEnv)
			_, _ = docker("rm", "--force", cluster.LockContainer(lockEnv))
		})
	})

	It("lets one up run and refuses the other, naming the holder, and deletes nothing of the winner's", func() {
		var wg sync.WaitGroup
		var outs [2]string
		var errs [2]error
		for i := range dirs {
			wg.Go(func() {
				defer GinkgoRecover()
				outs[i], errs[i] = run(dirs[i], "up", "--env", lockEnv, "--clusters", "1", "--image", suite.image, "--registry=false", "--install=false")
			})
		}
		wg.Wait()
		winner, loser := 0, 1
		if errs[0] != nil {
			winner, loser = 1, 0
		}
		Expect(errs[winner]).NotTo(HaveOccurred(), outs[winner])
		Expect(errs[loser]).To(HaveOccurred(), "both runs succeeded:\n%s\n%s", outs[0], outs[1])
		Expect(outs[loser]).To(MatchRegexp(`environment "%s" is locked by meshctl up \(pid \d+ on host \S+ since `, lockEnv))
		Expect(outs[loser]).To(ContainSubstring("docker rm " + cluster.LockContainer(lockEnv)))

		state, err := docker("inspect", "--format", "{{.State.Running}}", lockEnv+"-cluster1-control-plane")
		Expect(err).NotTo(HaveOccurred(), "the winner's cluster is gone: %s", state)
		Expect(strings.TrimSpace(state)).To(Equal("true"))
		// Released when the winner finished.
		out, err := docker("ps", "--all", "--quiet", "--filter", "name=^"+cluster.LockContainer(lockEnv)+"$")
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.TrimSpace(out)).To(BeEmpty(), "lock container left behind")
	})

	It("takes over a lock whose holder is gone", func() {
		host, err := os.Hostname()
		Expect(err).NotTo(HaveOccurred())
		boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
		Expect(err).NotTo(HaveOccurred())
		pidns, err := os.Readlink("/proc/self/ns/pid")
		Expect(err).NotTo(HaveOccurred())
		// A holder on this host whose pid no longer exists, as a meshctl
		// killed with SIGKILL leaves it.
		out, err := docker("container", "create", "--name", cluster.LockContainer(lockEnv),
			"--label", "io.meshctl.lock.env="+lockEnv, "--label", "io.meshctl.lock.verb=up",
			"--label", "io.meshctl.lock.pid=1073741824", "--label", "io.meshctl.lock.host="+host,
			"--label", "io.meshctl.lock.since=2026-01-01T00:00:00Z", "--label", "io.meshctl.lock.boot-id="+strings.TrimSpace(string(boot)),
			"--label", "io.meshctl.lock.pid-ns="+pidns, "--label", "io.meshctl.lock.start=1",
			cluster.LockImage, "/meshctl-lock")
		Expect(err).NotTo(HaveOccurred(), out)
		out, err = run(dirs[0], "down", "--env", lockEnv)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("removing the stale lock"))
	})
})
