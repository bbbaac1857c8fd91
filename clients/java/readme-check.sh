#!/usr/bin/env bash
# Checks the README's quick start as a user would: a fresh Maven project that depends on
# the installed artifacts (run `mvn install` here first) compiles the first ```java block
# and runs it on Jedis and on Lettuce against localhost:6379. Starts a server with the
# module on 6379 when none answers there (DLOCK_MODULE, REDIS_SERVER), stopped by PID.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
module="${DLOCK_MODULE:-$here/../../target/release/libdlock.so}"
server="${REDIS_SERVER:-redis-server}"
work="$(mktemp -d)"
pid=""
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
mkdir -p "$work/src/main/java"
awk '/^```java/{f=1;next} /^```/{if(f){exit}} f' "$here/README.md" > "$work/src/main/java/QuickStart.java"
cat > "$work/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
  <groupId>example</groupId><artifactId>quickstart</artifactId><version>1</version>
  <properties><maven.compiler.release>17</maven.compiler.release>
    <project.build.sourceEncoding>UTF-8</project.build.sourceEncoding></properties>
  <dependencies>
    <dependency><groupId>io.dlock</groupId><artifactId>dlock-jedis</artifactId><version>0.1.0-SNAPSHOT</version></dependency>
    <dependency><groupId>io.dlock</groupId><artifactId>dlock-lettuce</artifactId><version>0.1.0-SNAPSHOT</version></dependency>
  </dependencies>
  <build><plugins><plugin><groupId>org.apache.maven.plugins</groupId>
    <artifactId>maven-compiler-plugin</artifactId><version>3.14.1</version></plugin></plugins></build>
</project>
POM
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
mvn -B -q compile dependency:build-classpath -Dmdep.outputFile=cp.txt
for t in jedis lettuce; do
  java -cp "target/classes:$(cat cp.txt)" QuickStart "$t"
done
