// The package as users load it: import (ESM) and require (CommonJS) on this Node, with
// types next to each; publint finds nothing to fix.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import * as esm from "dlock-redis";
import { publint } from "publint";

const root = path.join(path.dirname(fileURLToPath(import.meta.url)), "..");

test("import and require give the same API, each with its types", () => {
  const cjs = createRequire(import.meta.url)("dlock-redis");
  assert.deepEqual(Object.keys(cjs).sort(), Object.keys(esm).sort());
  for (const name of ["Dlock", "MultiLock", "RedLock", "NotHeld", "LockLost", "AcquireTimeout"]) {
    assert.equal(typeof esm[name], "function", name);
    assert.equal(typeof cjs[name], "function", name);
  }
  const out = execFileSync(process.execPath, ["-e", "const d = require('dlock-redis'); console.log(typeof d.Dlock)"], { cwd: root });
  assert.equal(String(out).trim(), "function");
  assert.ok(existsSync(path.join(root, "dist/esm/index.d.ts")));
  assert.ok(existsSync(path.join(root, "dist/cjs/index.d.ts")));
});

test("publint: no errors or warnings", async () => {
  const { messages } = await publint({ pkgDir: root, level: "warning" });
  assert.deepEqual(messages.map((m) => `${m.type} ${m.code}`), []);
});
