# The project's contract: every target CI and the README rely on.

GO       ?= go
BIN      := bin
FUZZTIME ?= 30s
BENCH    ?= .
COUNT    ?= 1
RESP_ROUNDS ?= 3
VENV     ?= .venv
PYTHON   ?= $(VENV)/bin/python
# The Go modules of the workspace (go.work): the main one, the benchmarks, the middleware stores.
GOMODS   := ./... ./bench/... $(patsubst %/go.mod,./%/...,$(wildcard clients/go/*/go.mod))

.PHONY: all build run test setup check-tools test-go test-python bench bench-global bench-python bench-compare bench-ext bench-resp bench-rls bench-soak fuzz soak vet fmt lint deps clean

all: build

## build: compile every package and command into bin/
build:
	$(GO) build ./...
	@mkdir -p $(BIN)
	@if [ -d cmd ] && ls cmd/*/main.go >/dev/null 2>&1; then $(GO) build -o $(BIN)/ ./cmd/...; fi
	$(GO) build -o $(BIN)/ ./bench/cmd/sluice-bench ./bench/cmd/resp-floor

## run: build sluiced and sluice (nothing else), and start the sidecar on the embedded
## defaults (state and socket under ./var/)
run:
	@mkdir -p $(BIN) var
	$(GO) build -o $(BIN)/ ./cmd/sluiced ./cmd/sluice
	$(BIN)/sluiced

## test: the whole suite: Go (race detector, shuffled order), the Python client, and
## redis-py (with and without hiredis) against sluiced's Redis protocol; setup first
test: setup test-go test-python

## setup: install what the tests need and is missing (README, "Prerequisites"): the
## system packages as root or with password-less sudo (else one line says the command to
## run), requirements-test.txt into $(VENV)/, and limits' tests from its source distribution
## (var/limits-suite/, patched to run against the limits storage)
setup:
	@./.ci/setup
	@VENV=$(VENV) clients/python/limits-suite/setup.sh

## check-tools: say what the test suite needs and is missing, installing nothing
check-tools:
	@./.ci/setup --check
	@clients/python/limits-suite/setup.sh --check

test-go: setup
	$(GO) test -race -shuffle=on -count=1 $(GOMODS)
	@# The race detector makes sync.Pool drop items, so the allocation tests
	@# skip under it, and the global scripts' conformance tests (serial calls
	@# to Redis) take several times as long under it: run them without it.
	$(GO) test -count=1 -run '(?i)allocs$$|Conformance$$' $(GOMODS)
	@# The server's suite again over the goroutine transport (the first run was
	@# the default, auto: event loops), without the tests whose servers do not
	@# take it: those that name their transports (loops, lock waits) and those
	@# whose sidecars are child processes (fleets, crashes), which the first
	@# run ran as they are.
	SLUICE_TEST_TRANSPORT=goroutines $(GO) test -race -shuffle=on -count=1 \
		-skip '^(TestFleet_|TestCrash_|TestLoop_|TestAuto_|TestLockWait_(loopServesOthers|waitersSleep|stopWhileWaiting|loopReleasesOffTheLoop)$$)' ./internal/server
	SLUICE_TEST_TRANSPORT=goroutines $(GO) test -count=1 -run '(?i)allocs$$' ./internal/server

# pytest-asyncio (limits' asyncio tests run with it) asks for its fixtures' loop scope, in
# every pytest run of the virtual environment.
test-python: export PYTEST_ADDOPTS += -o asyncio_default_fixture_loop_scope=function
test-python: setup build
	SLUICED=$(BIN)/sluiced $(PYTHON) -m pytest clients/python bench/python -q
	SLUICED=$(BIN)/sluiced $(PYTHON) -m pytest tests/compat -q
	@# The Python client and redis-py again, against the epoll transport.
	SLUICED=$(CURDIR)/.ci/sluiced-epoll $(PYTHON) -m pytest clients/python -q
	SLUICED=$(CURDIR)/.ci/sluiced-epoll $(PYTHON) -m pytest tests/compat -q
	@# limits' own storage and strategy tests against the limits storage (make setup patched them).
	SLUICED=$(BIN)/sluiced PYTHON=$(PYTHON) clients/python/limits-suite/run.sh

## bench: every benchmark (BENCH=regexp, COUNT=n to narrow or repeat)
bench:
	$(GO) test -run '^$$' -bench '$(BENCH)' -benchmem -count $(COUNT) $(GOMODS)

## bench-global: four sidecars (32 client processes) on one Redis and on a Redis Cluster, exact
## and leased global limits, beside the same processes calling Redis with a token-bucket script,
## taking turns (GLOBAL_ROUNDS, default 5), idle and with a busy loop per core; prints each side's
## decisions/s, latency and Redis CPU per decision (about 5 minutes); then sliding_log,
## window_counters and concurrency: Redis's CPU per decision and memory per bucket, beside
## CALLR's sorted-set script and a Figma-style hash script (GLOBAL_ROUNDS runs; about 1 minute each)
GLOBAL_ROUNDS ?= 5
bench-global:
	SLUICE_FLEET_SECONDS=3 SLUICE_FLEET_ROUNDS=$(GLOBAL_ROUNDS) $(GO) test -run '^$$' -bench 'BenchmarkFleet' -benchtime 1x -timeout 30m ./internal/server
	$(GO) test -run '^$$' -bench 'BenchmarkGlobalAlgorithms' -benchtime 1x -count $(GLOBAL_ROUNDS) -timeout 30m ./internal/global

## bench-python: the Python client's decisions/s and latency, against a bare socket echo
bench-python: build
	SLUICED=$(BIN)/sluiced python3 clients/python/bench/bench.py

## bench-compare: Sluice against Redis + Lua, redis-py and in-process limiters, side by side,
## the native protocol on the default transport and on each other (about 5 minutes; installs redis-server and redis-py when missing; writes bench/results/compare.*)
bench-compare: build
	$(BIN)/sluice-bench compare -sluiced $(BIN)/sluiced -python $$(./bench/setup.sh) $(COMPARE_FLAGS)

## bench-ext: memory per live bucket of sliding_log (N = 10, 100, 1000), window_counters (K = 60)
## and concurrency (N = 10), beside Redis's sorted set for the same sliding log (under a minute;
## installs redis-server when missing; writes bench/results/ext.*)
bench-ext: build
	@command -v redis-server >/dev/null 2>&1 || ./bench/setup.sh >/dev/null
	$(BIN)/sluice-bench memory-ext $(EXT_FLAGS)

## bench-resp: redis-benchmark against Redis 7, Sluice in its default configuration (auto) and
## on each other transport, and the event-loop floor, interleaved (about 3 minutes; needs
## redis-server and redis-benchmark)
bench-resp: build
	./bench/resp-bench.sh $(RESP_ROUNDS)

## bench-rls: Envoy's rate limit service (gRPC over its Unix socket) beside the native protocol,
## envoyproxy/ratelimit's design (INCRBY+EXPIRE per descriptor, pipelined; behind gRPC and alone)
bench-rls:
	$(GO) test -run '^$$' -bench BenchmarkRLS -benchtime 2s -count $(COUNT) ./internal/server

## bench-soak: sustained random acquires on disk-backed tables of 1M and 10M buckets
## (5 minutes; writes bench/results/soak.*)
bench-soak: build
	$(BIN)/sluice-bench soak $(SOAK_FLAGS)

## fuzz: run each fuzz target for FUZZTIME
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

## soak: the long forms of the crash, power-loss and bit-flip tests (minutes)
soak:
	$(GO) test -count=1 -run 'TestCrash' ./internal/server -args -crash.iterations=1000
	$(GO) test -count=1 -run 'TestPowerLoss|TestBitFlips' ./shm -args -powerloss.trials=5000 -bitflip.all
	$(GO) test -count=1 -run TestDirect_kill9 ./clients/go/sluice/direct -args -direct.kills=200

## vet: go vet
vet:
	$(GO) vet $(GOMODS)

## fmt: fail if any file is not gofmt'ed
fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

## lint: vet and formatting
lint: vet fmt

## deps: check the import arrows between packages (STYLE: layout and dependencies)
deps:
	@./.ci/deps.sh

clean:
	rm -rf $(BIN) $(VENV)
