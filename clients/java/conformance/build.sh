#!/bin/sh
# Builds the Java conformance driver (conformance/drivers/java-*.json) and copies it,
# with every jar it runs on, to target/conformance/java/ at the project root: the
# drivers run from that copy, so a `mvn verify` of clients/java running beside the
# conformance suite (CI runs them side by side) rewrites nothing a driver is loading.
# One build at a time (a lock): the two flavours ask at once.
set -e
cd "$(dirname "$0")/.."
mkdir -p conformance/target
exec 9>conformance/target/.build.lock
flock 9
mvn -B -q -DskipTests -pl conformance -am package
out=../../target/conformance/java
rm -rf "$out.new"
mkdir -p "$out.new/lib"
cp -R conformance/target/classes "$out.new/classes"
{ tr ':' '\n' < conformance/target/classpath.txt; echo; } | while IFS= read -r jar; do
  [ -n "$jar" ] && cp "$jar" "$out.new/lib/"
done
rm -rf "$out"
mv "$out.new" "$out"
