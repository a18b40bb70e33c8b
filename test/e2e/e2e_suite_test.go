package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/meshctl/meshctl/pkg/meshtest"
)

func TestE2E(t *testing.T) {
	if testing.Short() {
		t.Skip("e2e tier: skipped with -short")
	}
	suite.image = envOr("MESHCTL_E2E_IMAGE", "meshctl/node:v1.34.4")
	suite.registryImage = envOr("MESHCTL_E2E_REGISTRY_IMAGE", "meshctl/registry:v3.0.0")
	suite.testImage = envOr("MESHCTL_E2E_TEST_IMAGE", "meshctl/busybox:latest")
	RegisterFailHandler(Fail)
	RunSpecs(t, "meshctl e2e")
}

// suite holds what every spec shares.
var suite struct {
	meshctl       string // path of the meshctl binary under test
	artifacts     string
	image         string
	registryImage string
	testImage     string
}

// env, registryName and registryPort default to "e2e", meshctl-e2e-registry and
// 5001; MESHCTL_E2E_ENV and MESHCTL_E2E_REGISTRY_PORT change them so that two runs
// of the suite on one machine (two developers, two worktrees) never share clusters.
// Each Ordered container has an environment of its own, named env plus a suffix.
var (
	env          = envOr("MESHCTL_E2E_ENV", "e2e")
	registryName = "meshctl-" + env + "-registry"
	registryPort = envOr("MESHCTL_E2E_REGISTRY_PORT", "5001")
)

// current is the environment the running Ordered container works in: each
// container sets it in its BeforeAll (see attach) and clears it in a
// DeferCleanup, so that a failed spec anywhere in the suite saves that
// environment's pods, logs, events and status under
// <artifacts>/<env>/failures/<spec>/ before the spec's cleanup deletes
// anything. Each process runs one Ordered container at a time: one
// variable per process is enough.
var current *meshtest.Env

var _ = meshtest.ReportFailures(&current)

// attach gives the specs of a container the environment named name, which
// `meshctl up` (run by the container itself: the CLI is what it tests) has
// just made: meshtest reuses it — reading the clusters' records and
// kubeconfigs, never deleting anything; the container's own `meshctl down`
// stays the teardown — and becomes current until the container ends.
func attach(ctx context.Context, name string, opts ...meshtest.Option) *meshtest.Env {
	GinkgoHelper()
	e := reuse(ctx, name, opts...)
	setCurrent(e)
	return e
}

// reuse is another handle on environment name (other options, say another
// echo image), which does not become current.
func reuse(ctx context.Context, name string, opts ...meshtest.Option) *meshtest.Env {
	GinkgoHelper()
	e, err := meshtest.New(ctx, append([]meshtest.Option{
		meshtest.WithEnv(name), meshtest.WithReuse(true),
		meshtest.WithArtifacts(suite.artifacts), meshtest.WithEchoImage(suite.testImage),
	}, opts...)...)
	Expect(err).NotTo(HaveOccurred(), "reusing environment %q", name)
	return e
}

// setCurrent makes e the environment failures are reported from until the
// running container ends.
func setCurrent(e *meshtest.Env) {
	current = e
	DeferCleanup(func() { current = nil })
}

// slow marks the containers that take longest (two minutes and more): run
// in parallel, they start first, so that no process is left with a long
// container when the others have finished ("boulders first, then sand").
var slow = SpecPriority(1)

// keep says whether to leave the clusters for debugging (MESHCTL_E2E_KEEP).
func keep() bool { return os.Getenv("MESHCTL_E2E_KEEP") != "" }

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// prerequisites says why the suite cannot run on this machine, or "".
func prerequisites() string {
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		return fmt.Sprintf("no Docker engine answers (%v: %s): run `make e2e-env`", err, bytes.TrimSpace(out))
	}
	for _, img := range []string{suite.image, suite.registryImage, suite.testImage} {
		if err := exec.Command("docker", "image", "inspect", img).Run(); err != nil {
			return fmt.Sprintf("image %s is not on this machine: run `make e2e-env`", img)
		}
	}
	return ""
}

// The suite runs in one process (go test) or several (make e2e: the ginkgo
// CLI with -p), each running one Ordered container at a time. The first
// process checks the machine and builds the binaries; every process shares
// them and one artifacts directory, which is also where meshctl keeps its
// host's locks (an environment's, the kind network's guard): the processes
// are meshctl runs side by side, as two developers' would be.
var _ = SynchronizedBeforeSuite(func() []byte {
	if reason := prerequisites(); reason != "" {
		// Said on stderr too: a skip is easy to miss, and a tier that
		// cannot run must never look as if it passed.
		fmt.Fprintf(os.Stderr, "e2e tier SKIPPED: %s\n", reason)
		if os.Getenv("MESHCTL_E2E_REQUIRE") != "" {
			Fail("e2e tier required (MESHCTL_E2E_REQUIRE) but cannot run: " + reason)
		}
		Skip(reason)
	}
	dir, err := os.MkdirTemp("", "meshctl-e2e-")
	Expect(err).NotTo(HaveOccurred())
	// Both, side by side, as `make build` builds them: `meshctl up` builds
	// the dataplane image from the meshctl-dataplane beside it, and the
	// install specs give meshtest that binary too, so the CLI's rerun
	// finds the very image meshtest installed.
	// grpcnotrace as the Makefile: without it grpc-go links x/net/trace
	// and the dataplane binary every node receives nearly doubles.
	// -buildvcs=false: the CLI then names the dataplane image as meshtest
	// in this test binary does (go test never stamps a version), and the
	// install specs find the image meshtest installed unchanged.
	build := exec.Command("go", "build", "-buildvcs=false", "-tags", "grpcnotrace", "-o", dir+"/", "../../cmd/meshctl", "../../cmd/meshctl-dataplane")
	// Static, as `make build` builds them: the image has no C library.
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "building meshctl and meshctl-dataplane: %s", out)
	return []byte(dir)
}, func(dir []byte) {
	suite.meshctl = filepath.Join(string(dir), "meshctl")
	suite.artifacts = envOr("MESHCTL_E2E_ARTIFACTS", filepath.Join(string(dir), "artifacts"))
})

// meshctl runs the binary under test and returns its standard output; a
// failure fails the spec with the command's standard error.
func meshctl(args ...string) string {
	GinkgoHelper()
	out, errOut, err := meshctlResult(args...)
	Expect(err).NotTo(HaveOccurred(), "meshctl %s\n%s", strings.Join(args, " "), errOut)
	return out
}

// meshctlResult runs meshctl on the suite's artifacts directory and returns
// its standard output, standard error and error.
func meshctlResult(args ...string) (string, string, error) {
	return meshctlIn(suite.artifacts, args...)
}

// meshctlIn is meshctlResult on the artifacts directory dir: another
// host's, as a second container sharing the Docker socket would have.
func meshctlIn(dir string, args ...string) (string, string, error) {
	var out, errb bytes.Buffer
	cmd := exec.Command(suite.meshctl, append(args, "--artifacts", dir)...)
	cmd.Stdout = &out
	cmd.Stderr = &errb
	err := cmd.Run()
	where := ""
	if dir != suite.artifacts {
		where = " (artifacts " + dir + ")"
	}
	GinkgoWriter.Printf("$ meshctl %s%s\n%s", strings.Join(args, " "), where, errb.String())
	return out.String(), errb.String(), err
}

// meshctlJSON runs meshctl with -o json and decodes its output into v.
func meshctlJSON(v any, args ...string) {
	GinkgoHelper()
	out := meshctl(append(args, "-o", "json")...)
	Expect(json.Unmarshal([]byte(out), v)).To(Succeed(), "output: %s", out)
}

// docker runs a docker command and returns its combined output.
func docker(args ...string) (string, error) {
	out, err := exec.Command("docker", args...).CombinedOutput()
	return string(out), err
}

var execCommand = exec.Command
