// Package parallel is the suite TestIntegrationParallelProcesses runs with
// `ginkgo -p`: a user's suite, as docs/meshtest.md writes one, whose
// environment comes from MESHTEST_* (a topology of existing clusters). Each
// process writes what it saw under $MESHTEST_PARALLEL_OUT for the test to
// check: which process set the environment up, and whether every process had
// working clients for the same clusters while the environment still existed.
package parallel_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshctl/meshctl/internal/cli"
	"github.com/meshctl/meshctl/pkg/cluster/model"
	"github.com/meshctl/meshctl/pkg/meshtest"
)

func TestParallel(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "meshtest in parallel processes")
}

var out = os.Getenv("MESHTEST_PARALLEL_OUT")

// Seen is what one process writes: its number and PID, and each cluster's
// name and kubeconfig path as its Env has them.
type Seen struct {
	Process     int               `json:"process"`
	PID         int               `json:"pid"`
	Kubeconfigs map[string]string `json:"kubeconfigs"`
}

var env *meshtest.Env

// Every process logs meshctl's steps to its own file, named by PID (the
// process number is not known before Ginkgo parses its flags): only the
// process that makes the environment may have any.
var setup, attach = meshtest.SynchronizedSetup(&env, meshtest.WithLogger(cli.NewLogger(logFile())))

func logFile() *os.File {
	f, err := os.Create(filepath.Join(out, fmt.Sprintf("steps-%d.log", os.Getpid())))
	if err != nil {
		panic(err)
	}
	return f
}

var _ = SynchronizedBeforeSuite(setup, func(ctx SpecContext, data []byte) {
	attach(ctx, data)
	seen := Seen{Process: GinkgoParallelProcess(), PID: os.Getpid(), Kubeconfigs: map[string]string{}}
	for _, c := range env.Clusters() {
		seen.Kubeconfigs[c.Name] = c.Kubeconfig
	}
	b, err := json.Marshal(seen)
	Expect(err).NotTo(HaveOccurred())
	Expect(os.WriteFile(filepath.Join(out, fmt.Sprintf("process-%d.json", seen.Process)), b, 0o600)).To(Succeed())
})

var _ = meshtest.ReportFailures(&env)

// Enough specs, each slow enough, that several processes run some while the
// others are still busy: the environment must outlive them all.
var _ = Describe("an environment shared by parallel processes", func() {
	for i := range 6 {
		It(fmt.Sprintf("is there for spec %d, with working clients", i), func(ctx SpecContext) {
			time.Sleep(500 * time.Millisecond)
			env.ForEachCluster(func(g Gomega, c *meshtest.Cluster) {
				// The claim meshctl wrote when process 1 set up the
				// environment; the teardown removes it.
				_, err := c.Kube.CoreV1().ConfigMaps(model.ClaimNamespace).Get(ctx, model.ClaimName, metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
			})
		})
	}
})
