// The README as a user on Node 20 (the package's minimum) meets it: every ```js block at
// least parses on this Node (`node --check`, as an ES module), and the quick start runs
// as it is written against a real server (only the server's port is filled in).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";
import { promisify } from "node:util";
import { startServer } from "./setup.mjs";

const run = promisify(execFile);
const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
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

/**
 * What the README's snippets use without defining it (they are parts of a program): a
 * declaration for each, added to a block that does not define the name itself.
 */
const STUBS = {
  dlock: "declare const dlock: __Dlock;",
  eu: "declare const eu: __Dlock;",
  us: "declare const us: __Dlock;",
  redisA: "declare const redisA: __Redis;",
  redisB: "declare const redisB: __Redis;",
  redisC: "declare const redisC: __Redis;",
  both: "declare const both: __MultiLock;",
  buildReport: "declare function buildReport(o: { signal: AbortSignal; token: bigint }): Promise<void>;",
  os: "declare const os: { hostname(): string };",
  stopLeading: "declare function stopLeading(): void;",
};

test("every ```js and ```ts block of the README type-checks under module nodenext (as a TypeScript user compiles it)", async (t) => {
  const dir = scratch(t);
  const files = [];
  for (const [i, b] of [...blocks("js"), ...blocks("ts")].entries()) {
    const free = Object.entries(STUBS).filter(([name]) => {
      const defined =
        new RegExp(`(const|let|function)\\s+${name}\\b`).test(b.code) ||
        new RegExp(`import\\s*(\\{[^}]*\\b${name}\\b[^}]*\\}|${name}\\b)`).test(b.code);
      return !defined && new RegExp(`\\b${name}\\b`).test(b.code);
    });
    const prelude = free.length === 0 ? "" : [
      'import type { Dlock as __Dlock, MultiLock as __MultiLock } from "dlock-redis";',
      'import type { Redis as __Redis } from "ioredis";',
      ...free.map(([, d]) => d),
    ].join("\n");
    const file = `block${i}.mts`;
    // Each block is a module of its own (`export {}`), its snippet's lines kept as written.
    writeFileSync(path.join(dir, file), `${prelude}\n${b.code}\nexport {};\n`);
    files.push(file);
  }
  writeFileSync(path.join(dir, "tsconfig.json"), JSON.stringify({
    compilerOptions: {
      module: "nodenext",
      moduleResolution: "nodenext",
      target: "ES2022",
      lib: ["ES2022", "ESNext.Disposable"],
      types: ["node"],
      strict: true,
      noEmit: true,
      skipLibCheck: true,
    },
    files,
  }));
  const r = await run(process.execPath, [tsc, "-p", path.join(dir, "tsconfig.json")]).then(
    () => "",
    (e) => String(e.stdout) + String(e.stderr),
  );
  assert.equal(r, "", `README snippets that do not compile under nodenext:\n${r}`);
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
  assert.ok(quick.code.includes('import { Redis } from "ioredis"'), "the import that compiles under nodenext");
  const code = quick.code.replace("new Redis()", `new Redis(${server.port}, "127.0.0.1")`);
  const file = path.join(scratch(t), "quickstart.mjs");
  writeFileSync(file, code);
  const { stdout } = await run(process.execPath, [file], { timeout: 30000 });
  assert.match(stdout, /^fencing token \d+n?$/m);
  const r = server.client();
  assert.deepEqual(await r.call("DLOCK.SCAN", "0"), ["0", []], "the quick start left no lock behind");
});
