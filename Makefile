# Arbiter — the two commands that matter: `make run` and `make test`.
GO      ?= go
BIN     ?= bin/arbiter
LISTEN  ?= 127.0.0.1:50051
DATA    ?= data
BUF     := $(GO) tool -modfile=tools/go.mod buf
GOLANGCI_LINT := $(GO) tool -modfile=tools/go.mod golangci-lint
# make test's short fuzz runs (~10 s each on 2 cores).
FUZZ_PARSE_EXECS ?= 80000x
FUZZ_JSON_EXECS  ?= 200000x
FUZZ_YAML_EXECS  ?= 100000x
FUZZ_CODEC_EXECS ?= 100000x

.PHONY: all build image run test test-short test-k8s bench proto proto-check lint fuzz conformance conformance-e2e clean loadtest loadtest-ghz hostile fuzz-server generate

all: build

build:
	$(GO) build -o $(BIN) ./cmd/arbiter

# The container image as an OCI image layout in $(IMAGE_DIR), without a
# Docker daemon (internal/image): the static binary on a distroless-style
# base made from nothing, user nonroot, an SPDX SBOM attached as a
# referrer. Reproducible: the creation time is the last commit's.
IMAGE_DIR       ?= bin/image
IMAGE_PLATFORMS ?= linux/amd64
IMAGE_TAG       ?= dev
image:
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) \
		$(GO) run ./internal/image/mkimage -o $(IMAGE_DIR) -platform $(IMAGE_PLATFORMS) -tag $(IMAGE_TAG)

# Runs the server on its embedded bbolt store (./data) with the example policies.
run: build
	$(BIN) serve --listen $(LISTEN) --data $(DATA) --load deploy/examples --log-format text

# Every test: the lint (vet, buf, gofmt, golangci-lint), unit, golden,
# end-to-end (real processes, real bbolt files, real gRPC on loopback), a
# short fuzz of the manifest loader, the proto check, and the tests against
# a real kube-apiserver (test-k8s) when ../shared/k8s is there.
test: proto-check lint
	$(GO) test -race -count=1 ./...
	# The ValidatingAdmissionPolicy cases that exhaust the CEL cost budget,
	# skipped under -race (too slow there).
	$(GO) test -count=1 -run 'TestDifferential' ./engine/vap/
	# deploy/monitoring: the alert rules and the dashboard against the
	# metrics the servers export (a module of its own: Prometheus's deps).
	cd deploy/monitoring && $(GO) test -count=1 .
	# Fuzz budgets are execution counts, not durations: with a duration, Go 1.26's
	# fuzz coordinator can fail at the deadline with "context deadline exceeded"
	# and no failing input (golang/go#75804, fixed in Go 1.27).
	$(GO) test -run '^$$' -fuzz 'FuzzParse$$' -fuzztime $(FUZZ_PARSE_EXECS) ./engine/manifest
	$(GO) test -run '^$$' -fuzz 'FuzzDecodeJSON$$' -fuzztime $(FUZZ_JSON_EXECS) ./engine/manifest
	$(GO) test -run '^$$' -fuzz 'FuzzDecodeYAMLFast$$' -fuzztime $(FUZZ_YAML_EXECS) ./engine/manifest
	$(GO) test -run '^$$' -fuzz 'FuzzSplitDocuments$$' -fuzztime $(FUZZ_JSON_EXECS) ./engine/manifest
	# The server's own decoding of DecideRequest and of a Struct, against the libraries'.
	$(GO) test -run '^$$' -fuzz 'FuzzServerDecideRequest$$' -fuzztime $(FUZZ_CODEC_EXECS) ./proto/arbiter/v1
	$(GO) test -run '^$$' -fuzz 'FuzzStructValue$$' -fuzztime $(FUZZ_CODEC_EXECS) ./convert
	$(GO) test -run '^$$' -fuzz 'FuzzStructWire$$' -fuzztime $(FUZZ_CODEC_EXECS) ./convert
	# Against a real kube-apiserver (built once per machine, then cached).
	@if [ -x "$(K8S_RUN)" ]; then $(MAKE) --no-print-directory test-k8s; \
	else echo "make test: $(K8S_RUN) not found: the tests against a real kube-apiserver were skipped"; fi

test-short:
	$(GO) test -short -count=1 ./...

# Tests against a real kube-apiserver + etcd (../shared/k8s/run-apiserver,
# built from Go modules once per machine: ~10 min on 2 cores, then cached):
# the Kubernetes source, HA primaries elected with a Lease, and every other
# test that skips without ARBITER_K8S_RUN. K8S_PKGS and K8S_RUN_TESTS narrow it.
K8S_RUN       ?= $(abspath ../shared/k8s/run-apiserver)
K8S_PKGS      ?= ./kubesource/ ./e2e/
K8S_RUN_TESTS ?= .
test-k8s:
	$(K8S_RUN) --build-only >/dev/null
	ARBITER_K8S_RUN=$(K8S_RUN) $(GO) test -count=1 -timeout 30m -run '$(K8S_RUN_TESTS)' $(K8S_PKGS)

# Generated Go code other than the protos: engine/schema's built-in schemas,
# copied from the client-go of go.mod (run after bumping k8s.io/client-go;
# engine/schema's tests fail until then).
generate:
	$(GO) generate ./engine/schema

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./engine/... ./server/... ./store/... ./client/webhook/
	$(GO) test -run '^$$' -bench Apply10k -benchtime 3x -benchmem ./e2e/
	$(GO) test -run '^$$' -bench DecideProcess -benchtime 20000x ./e2e/

# Load test (loopback, bounded): 2,000 decisions/s for 60 s with the decision
# log on; reports p50/p99 latency, heap growth and CPU. LOAD_RATE and
# LOAD_SECONDS override the rate and duration.
LOAD_RATE    ?= 2000
LOAD_SECONDS ?= 60
loadtest:
	ARBITER_LOADTEST=1 ARBITER_LOADTEST_RATE=$(LOAD_RATE) ARBITER_LOADTEST_DURATION=$(LOAD_SECONDS) \
		$(GO) test -run '^TestLoad$$' -count=1 -v -timeout 10m ./server/

# Cross-process load test with ghz (pinned in tools/go.mod), loopback only,
# ~3 min: `arbiter serve --load` with 16 and 50 policies, both request shapes
# (object_json, object as a Struct), decision log off and on; prints
# decisions/s, p50/p99, server CPU µs per decision (/proc/PID/stat) beside
# the engine's CPU per Evaluate, and Decide vs an empty health check.
# GHZ_ARGS adds flags (-arbiter OLD,NEW -rounds 3: alternate binaries;
# -profile DIR: CPU profiles of the server). See docs/performance.md.
GHZ_SECONDS ?= 8
GHZ_ARGS    ?=
loadtest-ghz: build
	$(GO) run ./internal/loadtest -arbiter $(BIN) -duration $(GHZ_SECONDS)s $(GHZ_ARGS)

# 100,000 hostile decision requests through the full server stack: expected
# codes only, heap growth within 16 MiB (make test sends a few thousand).
HOSTILE_N ?= 100000
hostile:
	ARBITER_HOSTILE_N=$(HOSTILE_N) $(GO) test -run '^TestHostileRequests$$' -count=1 -v -timeout 30m ./server/

# Fuzz Decide and the manifest write path (random and hostile inputs), and
# the server's decoding of DecideRequest (its objects read from the wire
# included) against the standard codec.
fuzz-server:
	$(GO) test -run '^$$' -fuzz '^FuzzDecide$$' -fuzztime 200000x ./server/
	$(GO) test -run '^$$' -fuzz '^FuzzWriteManifest$$' -fuzztime 200000x ./server/
	$(GO) test -run '^$$' -fuzz '^FuzzServerDecideRequest$$' -fuzztime 1000000x ./proto/arbiter/v1/
	$(GO) test -run '^$$' -fuzz '^FuzzStructSize$$' -fuzztime 200000x ./server/limits/
	$(GO) test -run '^$$' -fuzz '^FuzzStructWire$$' -fuzztime 1000000x ./convert/

# Regenerates proto/arbiter/v1/*.pb.go with the tools pinned in tools/go.mod.
proto:
	$(BUF) lint
	$(BUF) generate

# Fails when the generated code is not what `make proto` produces.
proto-check:
	$(BUF) lint
	@tmp=$$(mktemp -d); cp -r proto $$tmp/proto.orig; cp server/gateway/arbiter.swagger.json $$tmp/; \
	$(BUF) generate; \
	if ! diff -r $$tmp/proto.orig proto >/dev/null || ! diff $$tmp/arbiter.swagger.json server/gateway/arbiter.swagger.json >/dev/null; then \
		diff -r $$tmp/proto.orig proto | head -20; rm -rf $$tmp; \
		echo "generated code is out of date: run make proto and commit"; exit 1; fi; \
	rm -rf $$tmp

# golangci-lint (pinned in tools/go.mod, configured in .golangci.yml): the
# package boundaries (depguard), staticcheck, errcheck, govet, ineffassign,
# unused and goimports. The first run builds it (~6 min on 2 cores, then cached).
lint:
	$(GO) vet ./...
	$(BUF) lint
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)
	$(GOLANGCI_LINT) run ./...

fuzz:
	$(GO) test -run '^$$' -fuzz 'FuzzParse$$' -fuzztime 500000x ./engine/manifest
	$(GO) test -run '^$$' -fuzz 'FuzzDecodeYAMLFast$$' -fuzztime 1000000x ./engine/manifest

# Kyverno's own suites (needs ../shared/conformance beside the checkout).
conformance: build
	python3 ../shared/conformance/run-kyverno-suites $(BIN)
	python3 ../shared/conformance/run-kyverno-suites $(BIN) --dir kyverno-policies
	python3 ../shared/conformance/run-kyverno-suites $(BIN) --kinds ValidatingAdmissionPolicy,ValidatingAdmissionPolicyBinding
	python3 ../shared/conformance/run-kyverno-suites $(BIN) --kinds ValidatingPolicy,NamespacedValidatingPolicy,MutatingPolicy,PolicyException
	python3 ../shared/conformance/run-kyverno-suites $(BIN) --kinds GeneratingPolicy,PolicyException
	python3 ../shared/conformance/run-kyverno-suites $(BIN) --dir kyverno-cli-more --case test-mutating-policy --case test-context-apicall-mpol --case test-context-configmap-mpol --case test-mutating-admission-policy

# Kyverno's chainsaw tests of the policy library (CHAINSAW_SUITES under
# ../shared/conformance/kyverno-policies), unchanged, against a real
# kube-apiserver (K8S_RUN) with Arbiter as its only admission webhook
# (internal/chainsawe2e); prints "N passed, M failed". About 15 minutes; not
# part of make test. SHARED=/path/to/shared for a checkout elsewhere.
SHARED          ?= $(abspath ../shared)
CHAINSAW_SUITES ?= pod-security-vpol best-practices-vpol
conformance-e2e: build
	$(K8S_RUN) --build-only >/dev/null
	$(GO) run ./internal/chainsawe2e -arbiter $(BIN) -run-apiserver $(K8S_RUN) \
		-chainsaw "$$($(SHARED)/conformance/build-chainsaw)" \
		$(addprefix $(SHARED)/conformance/kyverno-policies/,$(CHAINSAW_SUITES))

clean:
	rm -rf bin
