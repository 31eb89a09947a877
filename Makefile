# Arbiter — the two commands that matter: `make run` and `make test`.
GO      ?= go
BIN     ?= bin/arbiter
LISTEN  ?= 127.0.0.1:50051
DATA    ?= data
BUF     := $(GO) tool -modfile=tools/go.mod buf

.PHONY: all build run test test-short bench proto proto-check lint fuzz conformance clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/arbiter

# Runs the server on its embedded bbolt store (./data) with the example policies.
run: build
	$(BIN) serve --listen $(LISTEN) --data $(DATA) --load deploy/examples --log-format text

# Every test: unit, golden, end-to-end (real processes, real bbolt files, real
# gRPC on loopback), a short fuzz of the manifest loader, and the proto check.
test: proto-check
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	$(GO) test -run '^$$' -fuzz FuzzParse$$ -fuzztime 10s ./engine/manifest
	$(GO) test -run '^$$' -fuzz FuzzDecodeJSON -fuzztime 10s ./engine/manifest

test-short:
	$(GO) test -short -count=1 ./...

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./engine/... ./server/... ./store/...

# Regenerates proto/arbiter/v1/*.pb.go with the tools pinned in tools/go.mod.
proto:
	$(BUF) lint
	$(BUF) generate

# Fails when the generated code is not what `make proto` produces.
proto-check:
	$(BUF) lint
	@tmp=$$(mktemp -d); cp -r proto $$tmp/proto.orig; \
	$(BUF) generate; \
	if ! diff -r $$tmp/proto.orig proto >/dev/null; then \
		diff -r $$tmp/proto.orig proto | head -20; rm -rf $$tmp; \
		echo "generated code is out of date: run make proto and commit"; exit 1; fi; \
	rm -rf $$tmp

lint:
	$(GO) vet ./...
	$(BUF) lint
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1)

fuzz:
	$(GO) test -run '^$$' -fuzz FuzzParse -fuzztime 60s ./engine/manifest

# Kyverno's own suites (needs ../shared/conformance beside the checkout).
conformance: build
	python3 ../shared/conformance/run-kyverno-suites $(BIN)
	python3 ../shared/conformance/run-kyverno-suites $(BIN) --dir kyverno-policies

clean:
	rm -rf bin
