package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/meshctl/meshctl/pkg/cluster"
)

// A SIGKILLed `meshctl up` (a runner killed, the OOM killer) leaves a
// half-created kind cluster: status names it, an up recreates it without
// --recreate, and down removes it. The up that heals it is two runs racing,
// each with an artifacts directory of its own — as two containers sharing
// the host's Docker socket but not its filesystem are — so that only the
// Docker lock container can keep them apart (before the lock, the loser's
// rollback deleted the clusters the winner was creating). One environment
// and one cluster creation serve both, where two took one each.
var _ = Describe("a killed up, healed by one of two racing runs", Ordered, func() {
	killed := env + "-killed"
	args := []string{"up", "--env", killed, "--clusters", "1", "--image", suite.image,
		"--registry=false", "--install=false", "--connect=false", "--remote-secrets=false", "--cacerts=false"}
	// The suite's artifacts directory and the second run's own.
	var dirs [2]string

	BeforeAll(func() {
		dirs = [2]string{suite.artifacts, filepath.Join(suite.artifacts, "lock-1")}
		Expect(os.MkdirAll(dirs[1], 0o755)).To(Succeed())
		DeferCleanup(func() {
			if keep() {
				return
			}
			for _, d := range dirs {
				_, _, _ = meshctlIn(d, "down", "--env", killed)
			}
			_, _ = docker("rm", "--force", cluster.LockContainer(killed))
		})
	})

	killMidCreation := func() {
		GinkgoHelper()
		cmd := exec.Command(suite.meshctl, append(args, "--artifacts", suite.artifacts)...)
		Expect(cmd.Start()).To(Succeed())
		// Killed as soon as kind has made the node container.
		Eventually(func() string {
			out, _ := docker("ps", "-a", "--filter", "label=io.x-k8s.kind.cluster="+killed+"-cluster1", "--format", "{{.Names}}")
			return strings.TrimSpace(out)
		}).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).ShouldNot(BeEmpty())
		Expect(cmd.Process.Signal(syscall.SIGKILL)).To(Succeed())
		_ = cmd.Wait()
		// kind runs `docker run` as a child process, which outlives the
		// killed meshctl: until it ends, Docker lists a node it cannot
		// inspect (seen: "docker inspect … failed", and a delete that
		// found nothing to delete). A user's next command comes after
		// that; so does the test's.
		Eventually(func() error {
			_, err := docker("inspect", "--format", "{{.State.Status}}", killed+"-cluster1-control-plane")
			return err
		}).WithTimeout(time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	}

	It("is told apart from a foreign cluster by status", func() {
		killMidCreation()
		var st cluster.StatusResult
		Eventually(func() string {
			meshctlJSON(&st, "status", "--env", killed)
			if len(st.Clusters) == 0 {
				return ""
			}
			return st.Clusters[0].State
		}).WithTimeout(time.Minute).Should(Or(Equal(cluster.StateIncomplete), Equal(cluster.StateNotReady)))
	})

	It("is recreated without --recreate by the one of two racing ups that takes the lock; the other is refused, naming the holder, and deletes nothing of the winner's", func() {
		// The second run's directory holds a copy of the environment's
		// local records, as a second checkout of the same artifacts
		// would: either run can tell the killed cluster from a foreign one.
		own := filepath.Join(dirs[1], killed)
		Expect(os.RemoveAll(own)).To(Succeed())
		Expect(os.CopyFS(own, os.DirFS(filepath.Join(dirs[0], killed)))).To(Succeed())

		var wg sync.WaitGroup
		var outs, errOuts [2]string
		var errs [2]error
		for i := range dirs {
			wg.Go(func() {
				defer GinkgoRecover()
				outs[i], errOuts[i], errs[i] = meshctlIn(dirs[i], append(args, "-o", "json")...)
			})
		}
		wg.Wait()
		winner, loser := 0, 1
		if errs[0] != nil {
			winner, loser = 1, 0
		}
		Expect(errs[winner]).NotTo(HaveOccurred(), errOuts[winner])
		Expect(errs[loser]).To(HaveOccurred(), "both runs succeeded:\n%s\n%s", errOuts[0], errOuts[1])
		var res cluster.UpResult
		Expect(json.Unmarshal([]byte(outs[winner]), &res)).To(Succeed(), "output: %s", outs[winner])
		Expect(res.Clusters).To(HaveLen(1))
		Expect(res.Clusters[0].Action).To(Equal(cluster.ActionRecreated))

		Expect(errOuts[loser]).To(MatchRegexp(`environment "%s" is locked by meshctl up \(pid \d+ on host \S+ since `, killed))
		Expect(errOuts[loser]).To(ContainSubstring("docker rm " + cluster.LockContainer(killed)))
		state, err := docker("inspect", "--format", "{{.State.Running}}", killed+"-cluster1-control-plane")
		Expect(err).NotTo(HaveOccurred(), "the winner's cluster is gone: %s", state)
		Expect(strings.TrimSpace(state)).To(Equal("true"))
		// Released when the winner finished.
		out, err := docker("ps", "--all", "--quiet", "--filter", "name=^"+cluster.LockContainer(killed)+"$")
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.TrimSpace(out)).To(BeEmpty(), "lock container left behind")
		// The loser's directory sees the winner's cluster as its own.
		var st cluster.StatusResult
		meshctlJSON(&st, "status", "--env", killed)
		Expect(st.Clusters).To(HaveLen(1))
		Expect(st.Clusters[0].State).NotTo(Equal(cluster.StateIncomplete))
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
		out, err := docker("container", "create", "--name", cluster.LockContainer(killed),
			"--label", "io.meshctl.lock.env="+killed, "--label", "io.meshctl.lock.verb=up",
			"--label", "io.meshctl.lock.pid=1073741824", "--label", "io.meshctl.lock.host="+host,
			"--label", "io.meshctl.lock.since=2026-01-01T00:00:00Z", "--label", "io.meshctl.lock.boot-id="+strings.TrimSpace(string(boot)),
			"--label", "io.meshctl.lock.pid-ns="+pidns, "--label", "io.meshctl.lock.start=1",
			cluster.LockImage, "/meshctl-lock")
		Expect(err).NotTo(HaveOccurred(), out)
		_, errOut, err := meshctlIn(dirs[0], "down", "--env", killed)
		Expect(err).NotTo(HaveOccurred(), errOut)
		Expect(errOut).To(ContainSubstring("removing the stale lock"))
	})

	It("is removed by down", func() {
		meshctl("down", "--env", killed)
		killMidCreation()
		var down cluster.DownResult
		meshctlJSON(&down, "down", "--env", killed)
		Expect(down.Deleted).To(ConsistOf(killed + "-cluster1"))
		out, _ := docker("ps", "-a", "--filter", "label=io.x-k8s.kind.cluster="+killed+"-cluster1", "--format", "{{.Names}}")
		Expect(strings.TrimSpace(out)).To(BeEmpty())
	})
})
