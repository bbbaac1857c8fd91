// The package as users load it: import (ESM) and require (CommonJS) on this Node, with
// types next to each; publint finds nothing to fix.
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile, execFileSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import os from "node:os";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import * as esm from "dlock-redis";
import { promisify } from "node:util";
import { publint } from "publint";

const run = promisify(execFile);

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

/**
 * A copy of the package as a checkout has it — sources, no dist/ — with its
 * node_modules linked to this one's (so that nothing is fetched), in a new temp dir.
 */
function checkout(t) {
  const dir = mkdtempSync(path.join(os.tmpdir(), "dlock-redis-checkout-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const pkg = path.join(dir, "dlock-redis");
  mkdirSync(pkg);
  for (const f of ["package.json", "package-lock.json", "README.md", "tsconfig.json", "tsconfig.cjs.json", "src", "scripts"]) {
    cpSync(path.join(root, f), path.join(pkg, f), { recursive: true });
  }
  symlinkSync(path.join(root, "node_modules"), path.join(pkg, "node_modules"), "dir");
  const app = path.join(dir, "app");
  mkdirSync(app);
  writeFileSync(path.join(app, "package.json"), JSON.stringify({ name: "app", version: "1.0.0", private: true }));
  return { dir, pkg, app };
}

const NPM = ["--no-audit", "--no-fund", "--offline", "--loglevel=error"];

async function loads(app) {
  const esm = await run(process.execPath, ["--input-type=module", "-e", 'const m = await import("dlock-redis"); console.log(typeof m.Dlock)'], { cwd: app });
  const cjs = await run(process.execPath, ["-e", 'console.log(typeof require("dlock-redis").Dlock)'], { cwd: app });
  return [String(esm.stdout).trim(), String(cjs.stdout).trim()];
}

test("a checkout installs as a package (prepare): npm install ./clients/node, and npm pack (what an install from git does)", async (t) => {
  const { dir, pkg, app } = checkout(t);
  assert.equal(existsSync(path.join(pkg, "dist")), false);
  await run("npm", ["install", ...NPM, pkg], { cwd: app, timeout: 120000 });
  assert.deepEqual(await loads(app), ["function", "function"], "npm install <folder>");
  // Packed now, nothing to build again (prepare leaves a fresh dist/ alone): the tarball
  // has dist/ and installs into another project.
  const stamp = statSync(path.join(pkg, "dist", "esm", "index.js")).mtimeMs;
  const { stdout } = await run("npm", ["pack", "--silent", "--pack-destination", dir], { cwd: pkg, timeout: 120000 });
  assert.equal(statSync(path.join(pkg, "dist", "esm", "index.js")).mtimeMs, stamp, "not built twice");
  const tarball = path.join(dir, String(stdout).trim().split("\n").pop());
  const app2 = path.join(dir, "app2");
  mkdirSync(app2);
  writeFileSync(path.join(app2, "package.json"), JSON.stringify({ name: "app2", version: "1.0.0", private: true }));
  await run("npm", ["install", ...NPM, tarball], { cwd: app2, timeout: 120000 });
  assert.deepEqual(await loads(app2), ["function", "function"], "npm install <tarball>");
});
