"use strict";
// The Node.js example of docs/languages.md is a real test: its first ```js block
// is written to a temp dir (with node_modules linked) and run against a real
// redis-server with the module, in-process and as a script.

const { test } = require("node:test");
const assert = require("node:assert/strict");
const { execFile } = require("node:child_process");
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const { startServer, waitUntil } = require("./helpers");

const DOC = path.join(__dirname, "..", "..", "docs", "languages.md");

function exampleFile(t) {
  const m = /^```js\n([\s\S]*?)^```/m.exec(fs.readFileSync(DOC, "utf8"));
  assert.ok(m, `no \`\`\`js block in ${DOC}`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "dlock-node-doc-"));
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }));
  fs.symlinkSync(path.join(__dirname, "node_modules"), path.join(dir, "node_modules"), "dir");
  const file = path.join(dir, "example.js");
  fs.writeFileSync(file, m[1]);
  return file;
}

test("the example's functions", async (t) => {
  const server = await startServer(t);
  const r = server.client();
  process.env.REDIS_URL = `redis://127.0.0.1:${server.port}`;
  const ex = require(exampleFile(t));
  t.after(() => ex.redis.disconnect());

  assert.equal(ex.channel("orders"), "dlock:{orders}");
  assert.equal(ex.channel("{user1}:lock"), "dlock:{user1}:lock");

  // acquire with WAIT: served when another owner's short lease ends.
  const t0 = await r.call("DLOCK.ACQUIRE", "orders", "other", "PX", 300);
  const token = await ex.acquire("orders", "me", 30000, 20000);
  assert.ok(token > t0);
  assert.equal(await ex.renew("orders", "me", 60000), true);
  assert.equal(await ex.renew("orders", "stranger"), false);
  assert.equal(await ex.release("orders", "me"), true);
  await assert.rejects(ex.release("orders", "me"), /NOTHELD/);

  // acquireViaChannel: woken by the release notice.
  await r.call("DLOCK.ACQUIRE", "orders", "holder", "PX", 60000);
  const acquiring = ex.acquireViaChannel("orders", "me", 30000, 20000);
  assert.ok(
    await waitUntil(async () => (await r.pubsub("NUMSUB", "dlock:{orders}"))[1] >= 1),
  );
  await r.call("DLOCK.RELEASE", "orders", "holder");
  assert.ok((await acquiring) > token);
  assert.equal(await ex.release("orders", "me"), true);
  // Nobody lets go: null after the timeout.
  await r.call("DLOCK.ACQUIRE", "orders", "holder", "PX", 60000);
  assert.equal(await ex.acquireViaChannel("orders", "me", 30000, 300), null);
});

test("the example runs as a script", async (t) => {
  const server = await startServer(t);
  const file = exampleFile(t);
  const env = { ...process.env, REDIS_URL: `redis://127.0.0.1:${server.port}` };
  const out = await new Promise((resolve) => {
    execFile(process.execPath, [file], { env, timeout: 60000 }, (error, stdout, stderr) =>
      resolve({ error, stdout, stderr }),
    );
  });
  assert.equal(out.error, null, out.stderr);
  assert.match(out.stdout, /acquired orders with fencing token \d+/);
  assert.match(out.stdout, /released/);
  assert.match(out.stdout, /acquired again via the channel, token \d+/);
  assert.equal(await server.client().call("DLOCK.INFO", "orders"), null);
});
