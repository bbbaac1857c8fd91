#!/bin/sh
# Builds dlock-redis for the conformance drivers (conformance/drivers/node-*.json), from
# what `scripts/deps.sh node` installs: once, also when the three flavours ask at once
# (a lock), and not again while dist/ is newer than the sources.
set -e
cd "$(dirname "$0")/.."
exec 9>.conformance-build.lock
flock 9
[ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error
if [ -f dist/esm/index.js ] && [ -z "$(find src package.json tsconfig.json tsconfig.cjs.json -newer dist/esm/index.js -print -quit)" ]; then
  exit 0
fi
node scripts/build.mjs
