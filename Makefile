# meshctl — build, test, bench, e2e.
#
#   make up        build meshctl and run `meshctl up --clusters 3`
#   make test      unit + integration tests (integration tests skip with a reason
#                  when what they need — root, a Docker engine — is missing)
#   make bench     benchmarks, side by side in one run
#   make lint      gofmt + go vet
#   make e2e-env   Docker engine + offline kind node image (meshctl/node:v1.34.4) + registry image,
#                  all built from Debian apt and the Go module proxy (hack/e2e/README.md)
#   make e2e-smoke real kind clusters from that image (kind CLI), checked and deleted
SHELL := /bin/bash
GO ?= go
BIN := _output/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/meshctl/meshctl/pkg/version.Version=$(VERSION)
CLUSTERS ?= 3
UP_FLAGS ?=

.PHONY: all build test unit bench lint up down clean e2e-env e2e-smoke
all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/meshctl ./cmd/meshctl

test: lint
	$(GO) test -count=1 ./...

unit:
	$(GO) test -short -count=1 ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null; git ls-files -o --exclude-standard '*.go' 2>/dev/null)); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

up: build
	$(BIN)/meshctl up --clusters $(CLUSTERS) $(UP_FLAGS)

down: build
	$(BIN)/meshctl down

clean:
	rm -rf _output

e2e-env:
	hack/e2e/e2e-env.sh

e2e-smoke: e2e-env
	hack/e2e/smoke.sh
