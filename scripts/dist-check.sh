#!/usr/bin/env bash
# Installs every artifact of `make dist` into a fresh environment, as a user who has
# only dist/ would, and runs the quick start of its README from there against a server
# that loaded the module from dist/ (checked against its .sha256):
#
#   python   a new venv: pip install the wheel (and, in a second venv, the sdist);
#            the README's first ```python block
#   node     a new npm project: npm install the tarball and ioredis; the README's first
#            ```js block, which must exit by itself
#   java     a new Maven project whose only dlock repository is dist/maven; the README's
#            first ```java block, on Jedis and on Lettuce
#   rust     a new Cargo project with the unpacked .crate as its dependency; the README's
#            blocking and tokio quick starts (its ```rust blocks that are whole programs)
#   go       a new module with `replace` to clients/go (Go modules install from source);
#            the README's first ```go block
#
# The quick starts connect to localhost:6379. The check starts its server there when the
# port is free, uses a server already there when it has the module, and otherwise (another
# server answers) starts its own on a free port and rewrites the snippet's port.
#
#   scripts/dist-check.sh [part ...]     parts: python node java rust go (default: all)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIST="${DIST:-$ROOT/dist}"
SERVER="${REDIS_SERVER:-redis-server}"
GO="${GO:-$(command -v go 2>/dev/null || echo /usr/local/go/bin/go)}"
cd "$ROOT"

say() { echo "dist-check: $*" >&2; }
die() { echo "dist-check: error: $*" >&2; exit 1; }

work="$(mktemp -d "${TMPDIR:-/tmp}/dlock-dist-check.XXXXXX")"
pid=""
cleanup() { if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; fi; rm -rf "$work"; }
trap cleanup EXIT

# The first ```<lang> block of a README (with `need`, the first that contains it).
block() {
  local lang="$1" readme="$2" need="${3:-}"
  awk -v lang="$lang" -v need="$need" '
    $0 == "```" lang || index($0, "```" lang ",") == 1 { f = 1; body = ""; next }
    f && /^```/ { if (need == "" || index(body, need)) { printf "%s", body; exit } f = 0; next }
    f { body = body $0 "\n" }' "$readme"
}

up() { (echo > "/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The module from dist/, verified, in a server on 6379 (or a free port).
so="$(ls "$DIST"/libdlock-*.so 2>/dev/null | head -1)"
[ -n "$so" ] || die "no libdlock-*.so in $DIST: run make dist"
(cd "$DIST" && sha256sum -c --quiet "$(basename "$so").sha256") || die "$so does not match its .sha256"
port=6379
if up 6379; then
  if redis-cli -p 6379 MODULE LIST 2>/dev/null | grep -qx dlock; then
    say "using the server on 6379 (it has the dlock module)"
  else
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    say "another server answers on 6379 without the module: using port $port"
  fi
fi
if ! up "$port"; then
  "$SERVER" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --dir "$work" \
    --loadmodule "$so" > "$work/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do up "$port" && break; sleep 0.1; done
  up "$port" || { cat "$work/server.log" >&2; die "the server did not start"; }
fi
# Points a snippet at $port when it is not 6379.
retarget() {
  [ "$port" = 6379 ] && return 0
  sed -i -e "s/6379/$port/g" -e "s/redis\.Redis()/redis.Redis(port=$port)/g" \
    -e "s/new Redis()/new Redis($port)/g" "$1"
}

check_python() {
  local whl sdist
  whl="$(ls "$DIST"/dlock_redis-*.whl | head -1)"
  sdist="$(ls "$DIST"/dlock_redis-*.tar.gz | head -1)"
  python3 -m venv "$work/py" && "$work/py/bin/pip" install -q "$whl" >&2
  block python clients/python/README.md > "$work/quickstart.py"; retarget "$work/quickstart.py"
  (cd "$work" && timeout 60 "$work/py/bin/python" quickstart.py)
  python3 -m venv "$work/py-sdist" && "$work/py-sdist/bin/pip" install -q "$sdist" >&2
  "$work/py-sdist/bin/python" -c 'import dlock; print("sdist installs: dlock", dlock.__name__)'
}

check_node() {
  local tgz
  tgz="$(ls "$DIST"/dlock-redis-*.tgz | head -1)"
  mkdir -p "$work/node" && cd "$work/node"
  npm init -y >/dev/null
  npm pkg set type=module >/dev/null
  npm install --no-audit --no-fund --loglevel=error "$tgz" ioredis >&2
  block js "$ROOT/clients/node/README.md" > quickstart.mjs; retarget quickstart.mjs
  timeout 60 node quickstart.mjs
  cd "$ROOT"
}

check_java() {
  local v
  v="$(basename "$(ls -d "$DIST"/maven/io/dlock/dlock-jedis/*/ | head -1)")"
  mkdir -p "$work/java/src/main/java"
  block java clients/java/README.md > "$work/java/src/main/java/QuickStart.java"
  retarget "$work/java/src/main/java/QuickStart.java"
  cat > "$work/java/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
  <groupId>example</groupId><artifactId>quickstart</artifactId><version>1</version>
  <properties><maven.compiler.release>17</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding></properties>
  <repositories><repository><id>dlock-dist</id><url>file://$DIST/maven</url></repository></repositories>
  <dependencies>
    <dependency><groupId>io.dlock</groupId><artifactId>dlock-jedis</artifactId><version>$v</version></dependency>
    <dependency><groupId>io.dlock</groupId><artifactId>dlock-lettuce</artifactId><version>$v</version></dependency>
  </dependencies>
  <build><plugins><plugin><groupId>org.apache.maven.plugins</groupId>
    <artifactId>maven-compiler-plugin</artifactId><version>3.14.1</version></plugin></plugins></build>
</project>
POM
  # Its own local repository for io.dlock, so nothing installed by `mvn install` is used.
  local repo="$work/m2"
  mkdir -p "$repo"
  [ -d "$HOME/.m2/repository" ] && for d in "$HOME/.m2/repository"/*; do
    [ "$(basename "$d")" = io ] || ln -s "$d" "$repo/"; done
  mkdir -p "$repo/io" && for d in "$HOME/.m2/repository/io"/*; do
    [ -e "$d" ] && [ "$(basename "$d")" != dlock ] && ln -s "$d" "$repo/io/"; done
  (cd "$work/java" && mvn -B -q -Dmaven.repo.local="$repo" -Dstyle.color=never compile \
    dependency:build-classpath -Dmdep.outputFile=cp.txt >&2)
  local t
  for t in jedis lettuce; do
    (cd "$work/java" && timeout 60 java -cp "target/classes:$(cat cp.txt)" QuickStart "$t")
  done
}

check_rust() {
  local crate name
  crate="$(ls "$DIST"/dlock-client-*.crate | head -1)"
  name="$(basename "$crate" .crate)"
  mkdir -p "$work/rust/src" "$work/vendor"
  tar -xzf "$crate" -C "$work/vendor"
  cat > "$work/rust/Cargo.toml" <<TOML
[package]
name = "quickstart"
version = "0.1.0"
edition = "2021"
publish = false

[dependencies]
dlock-client = { path = "$work/vendor/$name" }
tokio = { version = "1", features = ["rt-multi-thread", "macros", "time"] }
TOML
  # The blocking quick start (the first whole program) and the tokio one.
  mkdir -p "$work/rust/src/bin"
  echo 'fn main() {}' > "$work/rust/src/main.rs"
  block rust clients/rust/README.md "fn main" > "$work/rust/src/bin/blocking.rs"
  block rust clients/rust/README.md "#[tokio::main]" > "$work/rust/src/bin/tokio.rs"
  local b
  for b in blocking tokio; do
    [ -s "$work/rust/src/bin/$b.rs" ] || die "clients/rust/README.md has no $b quick start (a \`\`\`rust block that is a whole program)"
    retarget "$work/rust/src/bin/$b.rs"
  done
  (cd "$work/rust" && cargo build -q --release --bins >&2)
  for b in blocking tokio; do
    (cd "$work/rust" && timeout 60 "./target/release/$b")
  done
}

check_go() {
  [ -x "$GO" ] || die "go not found"
  mkdir -p "$work/go" && cd "$work/go"
  "$GO" mod init example.com/quickstart >/dev/null 2>&1
  local mod
  mod="$(awk '/^module /{print $2; exit}' "$ROOT/clients/go/go.mod")"
  "$GO" mod edit -require "$mod@v0.0.0" -replace "$mod=$ROOT/clients/go"
  block go "$ROOT/clients/go/README.md" > main.go; retarget main.go
  "$GO" mod tidy >&2 && timeout 60 "$GO" run .
  cd "$ROOT"
}

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(python node java rust go)
for p in "${parts[@]}"; do
  case "$p" in
    python|node|java|rust|go)
      say "== $p: install from dist/ into a fresh environment, run the README's quick start"
      started=$SECONDS
      "check_$p"
      say "== $p: ok ($((SECONDS - started)) s)" ;;
    *) die "unknown part '$p': expected python, node, java, rust or go" ;;
  esac
done
say "every artifact installed and ran its quick start"
