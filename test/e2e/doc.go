// Package e2e is meshctl's end-to-end suite: Ginkgo specs that drive the
// meshctl binary against real kind clusters on a real Docker engine.
//
// It needs a Docker engine and a kind node image that this machine can use
// without a registry; `make e2e-env` provides both, and `make e2e` runs the
// suite. Without them every spec is skipped with the reason.
//
// Settings (environment variables):
//
//	MESHCTL_E2E_IMAGE           node image (default meshctl/node:v1.34.4)
//	MESHCTL_E2E_REGISTRY_IMAGE  registry image (default meshctl/registry:v3.0.0)
//	MESHCTL_E2E_TEST_IMAGE      image pushed to the registry (default meshctl/busybox:latest)
//	MESHCTL_E2E_ENV             environment name, prefix of every cluster (default e2e)
//	MESHCTL_E2E_REGISTRY_PORT   host port of the lifecycle specs' registry (default 5001; the
//	                            existing-cluster specs use that port + 2)
//	MESHCTL_E2E_KEEP            keep the clusters after the suite (debugging)
//	MESHCTL_E2E_ARTIFACTS       artifacts directory (default: a new temporary one)
//	MESHCTL_E2E_REQUIRE         fail, instead of skipping, when the suite cannot run
//
// Every scenario runs on pkg/meshtest: a failed spec leaves the pods, logs,
// events and status of its environment under
// <artifacts>/<env>/failures/<spec>/ (see docs/meshtest.md).
package e2e
