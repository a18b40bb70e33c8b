# meshctl — build, test, bench, e2e.
#
#   make up        build meshctl and run `meshctl up --clusters 3`
#   make test      unit + integration tests (integration tests skip with a reason
#                  when what they need — root, a Docker engine — is missing)
#   make bench     benchmarks, side by side in one run
#   make lint      gofmt + go vet
SHELL := /bin/bash
GO ?= go
BIN := _output/bin
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/meshctl/meshctl/pkg/version.Version=$(VERSION)
CLUSTERS ?= 3
UP_FLAGS ?=

.PHONY: all build test unit bench lint up down clean
all: build

build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/meshctl ./cmd/meshctl

test: lint
	$(GO) test -count=1 ./...

unit:
	$(GO) test -short -count=1 ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
	# The Istio Go peer lives in its own module (bench/go.mod) so istio.io/istio
	# never enters meshctl's go.mod; its interop tests run here too.
	cd bench && $(GO) test -run Interop -bench . -benchmem .

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
