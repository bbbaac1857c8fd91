#!/usr/bin/env bash
# Checks the README's quick start as a user would, with what the README says: the `mvn`
# command of its first ```sh block (the install of the artifacts, run here), a fresh Maven
# project made of its first ```xml block (the pom.xml) and first ```java block, and the
# commands of its second ```sh block (compile and run on Jedis and on Lettuce) run in that
# project against localhost:6379. Starts a server with the module on 6379 when none answers
# there (DLOCK_MODULE, REDIS_SERVER), stopped by PID.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
module="${DLOCK_MODULE:-$here/../../target/release/libdlock.so}"
server="${REDIS_SERVER:-redis-server}"
work="$(mktemp -d)"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
# The n-th ```<lang> block of the README's "## Quick start" section.
block() {
  awk -v lang="$1" -v n="$2" '
    /^## / { inq = ($0 == "## Quick start") }
    inq && $0 == "```" lang { k++; if (k == n) { f = 1; next } }
    f && /^```/ { exit }
    f { print }' "$here/README.md"
}
install="$(block sh 1 | grep '^mvn ' || true)"
[ -n "$install" ] || { echo "readme-check: no mvn install command in the quick start's first sh block" >&2; exit 1; }
mkdir -p "$work/src/main/java"
block xml 1 > "$work/pom.xml"
block java 1 > "$work/src/main/java/QuickStart.java"
block sh 2 > "$work/run.sh"
for f in pom.xml src/main/java/QuickStart.java run.sh; do
  [ -s "$work/$f" ] || { echo "readme-check: the quick start gave no $f" >&2; exit 1; }
done
echo "readme-check: $install"
(cd "$here" && eval "$install")
# The quick start connects to 6379. A server already there is used when it has the module;
# when another answers there (one without the module), the check starts its own on a free
# port and points the copied class at it, so the check never depends on what else runs.
port=6379
if (echo > /dev/tcp/127.0.0.1/6379) 2>/dev/null; then
  if ! redis-cli -p 6379 MODULE LIST 2>/dev/null | grep -qx dlock; then
    port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    sed -i "s/6379/$port/g" "$work/src/main/java/QuickStart.java"
    echo "readme-check: a server without the dlock module answers on 6379; using port $port"
  fi
fi
if ! (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null; then
  "$server" --port "$port" --bind 127.0.0.1 --save '' --appendonly no --loadmodule "$module" >"$work/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
fi
cd "$work"
echo "readme-check: running the quick start's commands:"; cat run.sh
bash -euo pipefail run.sh
