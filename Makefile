# meshctl — build, test, bench, e2e.
#
#   make up        build meshctl and meshctl-dataplane, run `meshctl up --clusters 3` (on this
#                  project's registry-less machines: with the offline node image of `make e2e-env`)
#   make test      lint, unit + integration tests, then the e2e suite (which skips, saying
#                  why, when `make e2e-env` has not run)
#   make e2e-env   Docker engine + kind node image + registry image, built offline, cached
#   make e2e       the e2e suite on real kind clusters (requires e2e-env)
#   make bench     benchmarks, side by side in one run
#   make bench-table  the HBONE benchmarks N times, interleaved: the README's table
#   make lint      gofmt, go vet, staticcheck, shellcheck
SHELL := /bin/bash
GO ?= go
BIN := _output/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/meshctl/meshctl/pkg/version.Version=$(VERSION)
CLUSTERS ?= 3
UP_FLAGS ?=
K8S_VERSION ?= v1.34.4
NODE_IMAGE ?= meshctl/node:$(K8S_VERSION)
REGISTRY_IMAGE ?= meshctl/registry:v3.0.0
# OFFLINE=1 (default): no registry is reachable here, so `make up` builds and uses the
# offline node and registry images. OFFLINE= uses kind's stock images instead.
OFFLINE ?= 1
ifeq ($(OFFLINE),1)
UP_DEPS := e2e-env
UP_IMAGES := --image $(NODE_IMAGE) --registry-image $(REGISTRY_IMAGE)
endif
E2E_PKG := ./test/e2e
# The e2e suite runs its Ordered containers E2E_PROCS at a time (the ginkgo CLI,
# built from go.mod's ginkgo, is what runs a Ginkgo suite in parallel); each
# container has its own environment. The default is 1: on 2 vCPUs two processes
# made the suite slower, not faster (2026-12-05, 80 specs: 41.8 min with 2 against
# 22.2 min with 1; three kind clusters took 3m20 s to create instead of 40 s, load
# 44-100), because kubeadm and the control planes are CPU-bound. Raise it on a
# machine with cores to spare: E2E_PROCS=4 make e2e.
# E2E_ARGS adds ginkgo flags, e.g. E2E_ARGS='--focus=IPv6 --json-report=r.json'.
E2E_PROCS ?= 1
E2E_ARGS ?=
GINKGO := _output/tools/ginkgo
# The tests build as `make build` and the e2e suite build the binaries: static
# and without grpc-go's x/net/trace. Built otherwise (cgo on, where gcc is
# found), every package above net would be compiled twice, and on a cold cache
# (CI's) the e2e suite's build of meshctl and meshctl-dataplane redid them all.
# (GOFLAGS keeps what `go env` sets, -buildvcs=false on these machines.)
TEST_ENV := CGO_ENABLED=0 GOFLAGS="$(strip $(shell $(GO) env GOFLAGS) -tags=grpcnotrace)"
# Every run writes its JSON report to E2E_REPORT (a --json-report in E2E_ARGS
# takes its place); when the suite fails, hack/e2e-failures.sh prints each
# failed spec's message from it, as the output's last lines.
E2E_REPORT ?= _output/e2e-report.json
E2E_RUN = report="$(abspath $(E2E_REPORT))"; \
	for a in $(E2E_ARGS); do case "$$a" in --json-report=*) report="$${a\#--json-report=}";; esac; done; \
	mkdir -p "$$(dirname "$$report")" && rm -f "$$report" && \
	$(TEST_ENV) $(GINKGO) -v --procs=$(E2E_PROCS) --timeout=80m --poll-progress-after=10m --json-report="$$report" $(E2E_ARGS) $(E2E_PKG) \
	|| { hack/e2e-failures.sh "$$report"; exit 1; }
UNIT_PKGS = $(shell $(GO) list ./... | grep -v /test/e2e)

.PHONY: all build test unit integration e2e e2e-env e2e-smoke bench bench-table noop-timing lint up down clean
all: build

# meshctl-dataplane, beside meshctl, is what meshctl builds the dataplane
# image from: stripped (-s -w), since every node receives it. grpcnotrace
# keeps grpc-go from linking golang.org/x/net/trace, whose html/template
# turns off the linker's dead-method elimination and nearly doubles the
# binary (47 MB -> 89 MB unstripped).
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/meshctl ./cmd/meshctl
	CGO_ENABLED=0 $(GO) build -trimpath -tags grpcnotrace -ldflags '-s -w $(LDFLAGS)' -o $(BIN)/meshctl-dataplane ./cmd/meshctl-dataplane

test: lint integration $(GINKGO)
	$(E2E_RUN)

unit:
	$(TEST_ENV) $(GO) test -short -count=1 $(UNIT_PKGS)
	cd hack/tools && $(GO) test -short -count=1 ./...

integration:
	$(TEST_ENV) $(GO) test -count=1 -timeout 20m $(UNIT_PKGS)
	cd hack/tools && $(GO) test -count=1 ./...

e2e: e2e-env $(GINKGO)
	export MESHCTL_E2E_REQUIRE=1; $(E2E_RUN)

bench:
	$(GO) test -run '^$$' -bench . -benchmem $(UNIT_PKGS)
	# The Istio Go peer lives in its own module (bench/go.mod) so istio.io/istio
	# never enters meshctl's go.mod; its interop tests run here too.
	cd bench && $(GO) test -run Interop -bench . -benchmem . ./istioca ./istioxds ./istiozds

# staticcheck is pinned in hack/tools/go.mod (a module of its own, so its
# dependencies stay out of meshctl's go.mod) and built from the module proxy.
# shellcheck comes from Debian (apt-get install shellcheck; .ci/run installs it).
STATICCHECK := _output/tools/staticcheck
SHELL_SCRIPTS = .ci/run $(shell git ls-files '*.sh')

# The README's performance table: the HBONE benchmarks N times, interleaved,
# min/median/max of every figure and ratio (N=5 by default; see hack/bench.sh).
bench-table:
	hack/bench.sh

# No-op reruns of `meshctl up` step by step: min/median/max time, docker
# commands and API requests per status line (hack/noop-timing.sh). The
# environment must be up as UP_ARGS say, e.g.
#   make noop-timing UP_ARGS="--env noop --clusters 3 --registry=false" RUNS=10
RUNS ?= 5
noop-timing: build
	hack/noop-timing.sh -n $(RUNS) $(BIN)/meshctl -- $(UP_ARGS)

lint: $(STATICCHECK)
	@out=$$(gofmt -l $$($(GO) list -f '{{.Dir}}' ./...) hack/tools); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	cd hack/tools && $(GO) vet ./... && $(CURDIR)/$(STATICCHECK) ./...
	@command -v shellcheck >/dev/null || { echo "shellcheck not found: apt-get install shellcheck"; exit 1; }
	shellcheck $(SHELL_SCRIPTS)

# Rebuilt when the pin changes.
$(GINKGO): go.mod go.sum
	$(GO) build -o $@ github.com/onsi/ginkgo/v2/ginkgo

$(STATICCHECK): hack/tools/go.mod hack/tools/go.sum
	cd hack/tools && $(GO) build -o $(CURDIR)/$@ honnef.co/go/tools/cmd/staticcheck

up: build $(UP_DEPS)
	$(BIN)/meshctl up --clusters $(CLUSTERS) $(UP_IMAGES) $(UP_FLAGS)

down: build
	$(BIN)/meshctl down --registry

e2e-env:
	hack/e2e/e2e-env.sh

e2e-smoke: e2e-env
	hack/e2e/smoke.sh

clean:
	rm -rf _output
