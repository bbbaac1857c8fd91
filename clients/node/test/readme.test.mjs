// The README as a user on Node 20 (the package's minimum) meets it: every ```js block at
// least parses on this Node (`node --check`, as an ES module), and the quick start runs
// as it is written against a real server (only the server's port is filled in).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { startServer } from "./setup.mjs";

const run = promisify(execFile);
const root = path.join(path.dirname(fileURLToPath(import.meta.url)), "..");
const readme = readFileSync(path.join(root, "README.md"), "utf8");

/** The ```lang blocks of the README, each with the heading it sits under. */
function blocks(lang) {
  const out = [];
  let heading = "";
  let body = null;
  for (const line of readme.split("\n")) {
    if (body === null) {
      if (line.startsWith("#")) heading = line.replace(/^#+\s*/, "");
      if (line.trim() === "```" + lang) body = [];
    } else if (line.trim() === "```") {
      out.push({ heading, code: body.join("\n") + "\n" });
      body = null;
    } else {
      body.push(line);
    }
  }
  return out;
}

/** A scratch directory inside the package, so `import "dlock-redis"` and "ioredis" resolve. */
function scratch(t) {
  const dir = mkdtempSync(path.join(root, "build-test", "readme-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

test("every ```js block of the README parses on this Node", async (t) => {
  const js = blocks("js");
  assert.ok(js.length >= 4, `found ${js.length} js blocks`);
  const dir = scratch(t);
  const failed = [];
  for (const [i, b] of js.entries()) {
    const file = path.join(dir, `block${i}.mjs`);
    writeFileSync(file, b.code);
    try {
      await run(process.execPath, ["--check", file]);
    } catch (e) {
      failed.push(`block ${i} (under "${b.heading}"):\n${b.code}\n${String(e.stderr).split("\n").slice(0, 6).join("\n")}`);
    }
  }
  assert.deepEqual(failed, [], `these README js blocks do not parse on Node ${process.version}`);
});

test("await using appears only in ```ts blocks", () => {
  for (const b of blocks("js")) assert.ok(!/\bawait using\b/.test(b.code), `a js block under "${b.heading}" uses await using`);
  assert.ok(blocks("ts").some((b) => /\bawait using\b/.test(b.code)), "the README shows await using in a ts block");
});

test("the quick start runs as written against a server", async (t) => {
  const server = await startServer(t);
  const quick = blocks("js").find((b) => b.heading === "Quick start");
  assert.ok(quick, "a js block under Quick start");
  assert.ok(quick.code.includes("new Redis()"), "the quick start connects with new Redis()");
  const code = quick.code.replace("new Redis()", `new Redis(${server.port}, "127.0.0.1")`);
  const file = path.join(scratch(t), "quickstart.mjs");
  writeFileSync(file, code);
  const { stdout } = await run(process.execPath, [file], { timeout: 30000 });
  assert.match(stdout, /^fencing token \d+n?$/m);
  const r = server.client();
  assert.deepEqual(await r.call("DLOCK.SCAN", "0"), ["0", []], "the quick start left no lock behind");
});
