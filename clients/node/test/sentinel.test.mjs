// Through Sentinel: an ioredis Redis with `sentinels`, and node-redis' sentinel client.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Dlock } from "dlock-redis";
import { Redis, harness, startServer, waitUntil } from "./setup.mjs";
import { createSentinel } from "redis";

test("Sentinel: ioredis and node-redis find the master, wait and release", async (t) => {
  const master = await startServer(t);
  const sentinel = await harness.startSentinel(t, master);
  const io = new Redis({ sentinels: [{ host: "127.0.0.1", port: sentinel.port }], name: "mymaster" });
  io.on("error", () => {});
  t.after(() => io.disconnect());
  const nr = createSentinel({ name: "mymaster", sentinelRootNodes: [{ host: "127.0.0.1", port: sentinel.port }] });
  nr.on("error", () => {});
  await nr.connect();
  t.after(() => nr.destroy());
  for (const client of [io, nr]) {
    const d = new Dlock(client);
    const h = await d.lock("s").acquire();
    const waiting = d.lock("s").acquire({ timeout: 20000 });
    assert.ok(await waitUntil(async () => (await d.info("s")).waiters.length === 1));
    assert.equal(await h.release(), "released");
    const h2 = await waiting;
    assert.ok(h2.token > h.token);
    assert.equal(await h2.release(), "released");
    assert.equal(await master.client().call("DLOCK.INFO", "s"), null);
    // Prompt notice through the sentinel-found master.
    const h3 = await d.lock("s").acquire();
    await d.forceRelease("s");
    await new Promise((resolve) => (h3.signal.aborted ? resolve() : h3.signal.addEventListener("abort", resolve)));
    assert.equal(h3.signal.reason.reason, "forced");
    d.close();
  }
});
