#!/usr/bin/env bash
# `make dist`: builds every installable artifact of the project into dist/ (or $DIST):
#
#   libdlock-<version>-linux-<arch>.so + .sha256   the module (cargo build --release)
#   dlock_redis-<v>-py3-none-any.whl, dlock_redis-<v>.tar.gz
#                                                   the Python package (wheel and sdist)
#   dlock-redis-<v>.tgz                             the Node package (npm pack)
#   maven/                                          the Java artifacts with their POMs, sources
#                                                   and javadoc jars, as a Maven repository
#                                                   (file:// URL; mvn deploy to a folder)
#   dlock-client-<v>.crate                          the Rust client (cargo package)
#   SHA256SUMS                                      a checksum of every file above
#
# None of the packages is on a public registry; scripts/dist-check.sh installs each one
# into a fresh environment and runs its README's quick start from it.
#
#   scripts/dist.sh [part ...]     parts: module python node java rust (default: all)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIST="${DIST:-$ROOT/dist}"
VENV="${VENV:-$ROOT/.venv}"
CARGO="${CARGO:-cargo}"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
cd "$ROOT"

say() { echo "dist: $*" >&2; }
die() { echo "dist: error: $*" >&2; exit 1; }

# The version of a Cargo manifest's [package].
cargo_version() { awk -F'"' '/^\[package\]/{p=1} p && /^version *=/{print $2; exit}' "$1"; }

dist_module() {
  local v arch out
  v="$(cargo_version Cargo.toml)"
  arch="$(uname -m)"
  say "module: cargo build --release"
  "$CARGO" build --release -q -p dlock
  out="libdlock-$v-linux-$arch.so"
  cp "$TARGET/release/libdlock.so" "$DIST/$out"
  (cd "$DIST" && sha256sum "$out" > "$out.sha256")
  say "module: $out ($(cut -c1-16 "$DIST/$out.sha256")…)"
}

dist_python() {
  [ -x "$VENV/bin/python" ] || die "no Python venv at $VENV: run scripts/deps.sh python"
  if ! "$VENV/bin/python" -c 'import build' >/dev/null 2>&1; then
    say "python: installing the 'build' package into $VENV"
    "$VENV/bin/python" -m pip install -q build >&2
  fi
  say "python: python -m build (sdist and wheel)"
  local tmp
  tmp="$(mktemp -d)"
  # A copy, so the build leaves no egg-info or build/ in the source tree.
  cp -r clients/python "$tmp/src"
  rm -rf "$tmp/src/build" "$tmp/src/"*.egg-info "$tmp/src/src/"*.egg-info
  "$VENV/bin/python" -m build -q --outdir "$DIST" "$tmp/src" >&2
  rm -rf "$tmp"
}

dist_node() {
  command -v npm >/dev/null 2>&1 || die "npm not found: install Node.js 20+"
  say "node: npm pack (builds the package first)"
  (cd clients/node && [ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error >&2)
  (cd clients/node && node scripts/build.mjs >&2 && npm pack --silent --pack-destination "$DIST" >/dev/null)
}

dist_java() {
  command -v mvn >/dev/null 2>&1 || die "mvn not found: scripts/deps.sh java"
  say "java: mvn deploy to $DIST/maven (jars, sources, javadoc; tests skipped: make test-java runs them)"
  rm -rf "$DIST/maven"
  (cd clients/java && mvn -B -q -DskipTests \
    org.apache.maven.plugins:maven-source-plugin:3.3.1:jar-no-fork \
    org.apache.maven.plugins:maven-javadoc-plugin:3.11.2:jar \
    deploy -pl "!dlock-bench,!dlock-spring-boot-tests/boot3,!dlock-spring-boot-tests/boot4" -Dstyle.color=never -Dmaven.deploy.skip=false \
    -DaltDeploymentRepository="dist::file://$DIST/maven" \
    -Ddoclint=none -Dmaven.javadoc.failOnWarnings=false -Dquiet=true >&2)
}

dist_rust() {
  say "rust: cargo package -p dlock-client"
  # --no-verify: scripts/dist-check.sh builds the packaged crate in a fresh project.
  "$CARGO" package -q -p dlock-client --no-verify --allow-dirty >&2
  local v
  v="$(cargo_version clients/rust/Cargo.toml)"
  cp "$TARGET/package/dlock-client-$v.crate" "$DIST/"
}

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(module python node java rust)
mkdir -p "$DIST"
for p in "${parts[@]}"; do
  case "$p" in
    module|python|node|java|rust) "dist_$p" ;;
    *) die "unknown part '$p': expected module, python, node, java or rust" ;;
  esac
done
(cd "$DIST" && find . -type f ! -name SHA256SUMS ! -name '*.sha256' ! -path './maven/*' -printf '%P\n' \
  | sort | xargs -r sha256sum > SHA256SUMS)
say "artifacts in $DIST:"
(cd "$DIST" && ls -1 | sed 's/^/  /' >&2)
