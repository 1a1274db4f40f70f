# NoETL developer targets. Tools are pinned here and installed with `go install`.
SHELL := /bin/bash
GOBIN ?= $(shell go env GOPATH)/bin
export PATH := $(GOBIN):$(PATH)

BUF_VERSION            := v1.75.0
PROTOC_GEN_GO          := v1.36.12
PROTOC_GEN_GO_GRPC     := v1.6.2
GRPC_GATEWAY           := v2.33.0
STATICCHECK            := v0.8.2
GOLANGCI_LINT          := v2.15.0

# The CLI's version (noetl version): the nearest v* tag, or "devel"; the commit comes from
# the build's VCS stamp.
VERSION ?= $(shell git describe --tags --match 'v*' --dirty 2>/dev/null || echo devel)
GO_BUILD := go build -buildvcs=true -ldflags "-X main.version=$(VERSION)"

# Every module of the workspace (go.work).
MODULES := $(shell sed -n 's#^\t\./##p' go.work)
PKGS    := $(addsuffix /...,$(addprefix ./,$(MODULES)))

.PHONY: run dev test test-integration bench proto lint tools postgres python3 build install

## run: install Postgres and python3 if missing, start the dev mesh, run examples/hello.yaml, keep serving
run: postgres python3
	$(GO_BUILD) -o bin/noetl ./cmd/noetl
	bin/noetl dev --run examples/hello.yaml

## dev: start the dev mesh and keep serving
dev: postgres python3
	$(GO_BUILD) -o bin/noetl ./cmd/noetl
	bin/noetl dev

## install: put the noetl CLI on your PATH, in $(go env GOPATH)/bin
install:
	go install -buildvcs=true -ldflags "-X main.version=$(VERSION)" ./cmd/noetl
	@echo "installed $$(go env GOPATH)/bin/noetl; add it to PATH if needed: export PATH=\"$$(go env GOPATH)/bin:\$$PATH\""

## test: the whole test suite (unit, integration, conformance) with the race detector
test: postgres
	CI=$${CI:-} go test -race -count=1 -timeout 25m $(filter-out ./conformance/...,$(PKGS))
	cd deploy && GOWORK=off go test -count=1 -timeout 10m ./...
	CI=$${CI:-} go test -race -count=1 -timeout 15m -v -run TestConformance ./conformance/ 2>&1 | grep -vE '^\s*$$|"level"'; exit $${PIPESTATUS[0]}

## build: build every binary into bin/
build:
	mkdir -p bin
	for s in gateway orchestrator materializer statebuilder worker resultstore; do \
		go build -o bin/$$s ./services/$$s/cmd/$$s || exit 1; done
	$(GO_BUILD) -o bin/noetl ./cmd/noetl

## bench: the chain and concurrent benchmarks (JSON lines)
bench: postgres
	go run ./bench --workload chain --n 200
	go run ./bench --workload concurrent --executions 50 --steps 10
	go run ./bench --workload fanout --n 1000

## proto: regenerate gen/ from proto/
proto: tools
	buf generate

## lint: buf lint, gofmt, go vet, staticcheck, and the import graph (golangci-lint's depguard, .golangci.yml)
lint: tools
	buf lint
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); if [ -n "$$out" ]; then echo "gofmt: $$out"; exit 1; fi
	go vet $(PKGS)
	staticcheck $(PKGS)
	golangci-lint run $(PKGS)

## tools: install the pinned code generators and linters
tools:
	@command -v buf >/dev/null && buf --version | grep -q $(BUF_VERSION:v%=%) || go install github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION)
	@command -v protoc-gen-go >/dev/null || go install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO)
	@command -v protoc-gen-go-grpc >/dev/null || go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC)
	@command -v protoc-gen-grpc-gateway >/dev/null || go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-grpc-gateway@$(GRPC_GATEWAY)
	@command -v protoc-gen-openapiv2 >/dev/null || go install github.com/grpc-ecosystem/grpc-gateway/v2/protoc-gen-openapiv2@$(GRPC_GATEWAY)
	@command -v staticcheck >/dev/null || go install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK)
	@command -v golangci-lint >/dev/null && golangci-lint version --short | grep -q $(GOLANGCI_LINT:v%=%) || go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT)

## python3: make sure python3 (for python steps) is installed (Debian package, as root)
python3:
	@if command -v python3 >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 >/dev/null; \
	else echo "python3 is missing (python steps need it): run 'sudo apt-get install -y python3'"; exit 1; fi

## postgres: make sure the Postgres server binaries are installed (Debian packages, as root)
postgres:
	@if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	else echo "Postgres server binaries are missing: run 'sudo apt-get install -y postgresql' (or set NOETL_PG_URL)"; exit 1; fi
