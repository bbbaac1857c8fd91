// MultiLock over two servers, and RedLock over three.
import { test } from "node:test";
import assert from "node:assert/strict";
import { AcquireTimeout, Dlock, LockLost, MultiLock, RedLock } from "dlock-redis";
import { FLAVOURS, startServer } from "./setup.mjs";

const [, IOREDIS, , NODE_REDIS3] = FLAVOURS;

test("MultiLock: all or none, in a fixed order", async (t) => {
  const [s1, s2] = await Promise.all([startServer(t), startServer(t)]);
  const d1 = new Dlock(await IOREDIS.make(t, s1.port));
  const d2 = new Dlock(await NODE_REDIS3.make(t, s2.port));
  t.after(() => { d1.close(); d2.close(); });
  const ab = () => new MultiLock([d1.lock("a"), d2.lock("b"), d1.lock("c")]);
  const ba = () => new MultiLock([d1.lock("c"), d2.lock("b"), d1.lock("a")]);
  assert.deepEqual(ab().names, ba().names);
  // Opposite orders, concurrently: no deadlock.
  let n = 0;
  await Promise.all([ab, ba].map(async (make) => {
    for (let i = 0; i < 10; i++) {
      const m = await make().acquire({ timeout: 20000 });
      assert.equal(m.tokens.length, 3);
      n++;
      await m.release();
    }
  }));
  assert.equal(n, 20);
  // One busy: nothing kept.
  const busy = await d2.lock("b").acquire();
  assert.equal(await ab().tryAcquire(), null);
  await assert.rejects(ab().acquire({ timeout: 100 }), AcquireTimeout);
  assert.equal(await d1.info("a"), null);
  await busy.release();
  const m = await ab().acquire();
  await d2.forceRelease("b");
  const outcomes = await m.release();
  assert.deepEqual(
    Object.fromEntries(m.holds.map((h, i) => [h.key, outcomes[i]])),
    { a: "released", b: "lost", c: "released" },
  );
  assert.equal(m.signal.aborted, true);
});

test("RedLock: majority of three servers", async (t) => {
  const servers = await Promise.all([0, 1, 2].map(() => startServer(t)));
  // One server through each library: ioredis, node-redis, Valkey GLIDE.
  const clients = await Promise.all(servers.map((s, i) => FLAVOURS[[1, 3, 4][i]].make(t, s.port)));
  const rl = new RedLock(clients, "report", { watchdogLease: 600 });
  t.after(() => rl.nodes.forEach((d) => d.close()));
  const h = await rl.acquire({ timeout: 5000 });
  assert.equal(h.tokens.filter((x) => x !== null).length, 3);
  assert.ok(h.validity() > 0);
  assert.equal(await new RedLock(clients, "report").tryAcquire(), null, "held by a majority");
  assert.equal(await h.release(), "released");
  // Lost: two of three force-released; the watchdog sees no quorum.
  const h2 = await rl.acquire({ timeout: 5000 });
  await rl.nodes[0].forceRelease("report");
  await rl.nodes[1].forceRelease("report");
  const reason = await new Promise((resolve) => h2.signal.addEventListener("abort", () => resolve(h2.signal.reason)));
  assert.ok(reason instanceof LockLost);
  assert.equal(reason.reason, "no-quorum");
  assert.equal(await h2.release(), "lost");
  // One server down: still a majority.
  await servers[2].stop();
  const h3 = await rl.acquire({ timeout: 5000 });
  assert.equal(h3.tokens.filter((x) => x !== null).length, 2);
  assert.equal(await h3.release(), "released");
});
