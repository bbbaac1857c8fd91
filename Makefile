# dlock — Redis module for distributed locks. `make` (or `make help`) lists the targets.

PORT        ?= 6379
MODULE_ARGS ?=
CARGO       ?= cargo
# Extra arguments for `cargo test` and for the test binaries, e.g.
#   make test CARGO_TEST_ARGS="--test acquire" TEST_ARGS="--nocapture"
CARGO_TEST_ARGS ?=
TEST_ARGS       ?=
MODULE      ?= $(abspath $(or $(CARGO_TARGET_DIR),$(CURDIR)/target))/release/libdlock.so
SUDO        := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PKGS    := redis-server redis-tools libclang-dev

.DEFAULT_GOAL := help
.PHONY: help build run test check-deps deps fmt lint bench clean

help: ## List the targets
	@echo "Usage: make <target> [PORT=6379] [MODULE_ARGS='dlock.default-lease-ms 30000']"
	@echo
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-12s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

build: check-deps ## Build the module (target/release/libdlock.so)
	$(CARGO) build --release

run: build ## Run redis-server with the module in the foreground (PORT=6379, MODULE_ARGS=...)
	redis-server --port $(PORT) --loadmodule $(MODULE) $(MODULE_ARGS)

test: build ## Build, then run all tests: Rust, Python (redis-py) and Node (ioredis, if installed)
	DLOCK_MODULE=$(MODULE) $(CARGO) test --release --workspace $(CARGO_TEST_ARGS) -- $(TEST_ARGS)
	@$(or $(PYTHON),python3) -c 'import redis, pytest' 2>/dev/null || { \
		echo "error: the Python tests need redis-py and pytest:" >&2; \
		echo "    $(or $(PYTHON),python3) -m pip install -r tests/python/requirements.txt" >&2; exit 1; }
	DLOCK_MODULE=$(MODULE) PYTHONDONTWRITEBYTECODE=1 $(or $(PYTHON),python3) -m pytest -q -p no:cacheprovider tests/python $(PYTEST_ARGS)
	@if command -v node >/dev/null 2>&1 && [ -d tests/node/node_modules ]; then \
		echo "cd tests/node && node --test --test-reporter=spec"; \
		cd tests/node && DLOCK_MODULE=$(MODULE) node --test --test-reporter=spec; \
	else \
		echo "tests/node: skipped (needs node and \`npm ci\` in tests/node)"; \
	fi

check-deps: ## Check that cargo, redis-server and libclang are installed
	@command -v $(CARGO) >/dev/null 2>&1 || { \
		echo "error: cargo not found; install Rust (rustup) or run: . \$$HOME/.cargo/env" >&2; exit 1; }
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="$$missing redis-server"; \
	if [ -z "$$LIBCLANG_PATH" ] \
	   && ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 \
	   && ! { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null; } | grep -q libclang; then \
		missing="$$missing libclang"; \
	fi; \
	if [ -n "$$missing" ]; then \
		echo "error: missing:$$missing (needed to build and test dlock)." >&2; \
		echo "Install with:" >&2; \
		echo "    sudo apt-get install -y $(APT_PKGS)" >&2; \
		echo "or run: make deps" >&2; \
		exit 1; \
	fi

deps: ## Install what the build and tests need: redis-server, redis-tools, libclang-dev (apt), redis-py and pytest (pip)
	$(SUDO) apt-get update
	$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y $(APT_PKGS)
	$(or $(PYTHON),python3) -m pip install -r tests/python/requirements.txt \
		|| PIP_BREAK_SYSTEM_PACKAGES=1 $(or $(PYTHON),python3) -m pip install -r tests/python/requirements.txt

fmt: ## Format the code (cargo fmt --all)
	$(CARGO) fmt --all

lint: ## Check formatting and run clippy with warnings as errors
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

bench: build ## Benchmark dlock against SET NX PX, Lua and Redisson-style locks (BENCH_ARGS=--quick; ~4 min)
	DLOCK_MODULE=$(MODULE) $(CARGO) run --release -p dlock-bench -- $(BENCH_ARGS)

clean: ## Remove build outputs and leftover test dirs
	$(CARGO) clean
	rm -rf "$${TMPDIR:-/tmp}/dlock-tests"
