// What the package adds on top of the commands: the watchdog, the lost signal, waits
// that never stall the shared connection, aborts that leave nothing behind, re-entry
// inside withLock, and mutual exclusion under contention.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Dlock, LockLost, channelFor } from "dlock-redis";
import { FLAVOURS, startServer, sleep, waitUntil } from "./setup.mjs";

const [IOREDIS2, IOREDIS, NODE_REDIS2, NODE_REDIS3, GLIDE] = FLAVOURS;
const LONG = 20000;

for (const flavour of [IOREDIS, NODE_REDIS3, GLIDE]) {
  test(`watchdog, lost signal, aborts, re-entry (${flavour.name})`, async (t) => {
    const server = await startServer(t);
    const r = await flavour.make(t, server.port);

    await t.test("the watchdog keeps holds of several lease lengths", async () => {
      // (Not shorter: a 500 ms lease leaves a renewal 500 - 55 - 167 = 278 ms to be
      // acknowledged; at 250 ms it is 114 ms, which a loaded 2-core machine's scheduling
      // delays exceed — then the hold is rightly reported unreachable.)
      await Promise.all([500, 1000].map(async (lease) => {
        const d = new Dlock(r, { watchdogLease: lease });
        const h = await d.lock(`wd-${lease}`).acquire();
        await sleep(Math.max(3 * lease, 1500));
        assert.equal(h.signal.aborted, false, `lease ${lease}`);
        assert.equal(await h.check(), true, `lease ${lease}`);
        assert.equal(await h.release(), "released");
        d.close();
      }));
    });

    await t.test("FORCERELEASE: the signal aborts ('forced'), release() answers 'lost'", async () => {
      const seen = [];
      // The default 30 s lease: told by the notice, not at a renewal 10 s away (as before).
      const d = new Dlock(r, { onLost: (key, reason) => seen.push([key, reason]) });
      const h = await d.lock("gone").acquire();
      // acquire() waits a little (at most its request timeout: GLIDE's 250 ms) for the
      // subscription; a release before it is active is told as 'not-held'.
      assert.ok(await waitUntil(async () => Number((await server.client().call("PUBSUB", "NUMSUB", channelFor("gone")))[1]) === 1));
      await d.forceRelease("gone");
      const reason = await new Promise((resolve) => h.signal.addEventListener("abort", () => resolve(h.signal.reason)));
      assert.ok(reason instanceof LockLost);
      assert.equal(reason.reason, "forced");
      assert.deepEqual(seen, [["gone", "forced"]]);
      assert.equal(await h.release(), "lost");
      d.close();
    });

    await t.test("an event-loop stall past the lease aborts the signal", async () => {
      const d = new Dlock(r, { watchdogLease: 300 });
      const h = await d.lock("stall").acquire();
      const until = Date.now() + 900;
      while (Date.now() < until); // the loop is stuck: no renewal can be sent
      assert.equal(h.lost, true);
      assert.equal(h.signal.aborted, true);
      assert.equal(h.signal.reason.reason, "unreachable");
      assert.equal(await h.release(), "lost");
      d.close();
    });

    await t.test("an explicit lease ends by itself: 'expired'", async () => {
      const d = new Dlock(r);
      const h = await d.lock("lease").acquire({ lease: 200 });
      await new Promise((resolve) => h.signal.addEventListener("abort", resolve));
      assert.equal(h.signal.reason.reason, "expired");
      assert.equal(await h.release(), "lost");
      d.close();
    });

    await t.test("aborting a wait leaves nothing on the server", async () => {
      const d = new Dlock(r);
      const holder = await d.lock("ab").acquire();
      const ac = new AbortController();
      const waiting = d.lock("ab").acquire({ signal: ac.signal, timeout: LONG });
      assert.ok(await waitUntil(async () => (await d.info("ab")).waiters.length === 1));
      ac.abort(new Error("changed my mind"));
      await assert.rejects(waiting, /changed my mind/);
      const info = await d.info("ab");
      assert.deepEqual(info.waiters, []);
      assert.deepEqual(info.holders.map((x) => x.owner), [holder.owner]);
      // An abort before the call: nothing is sent.
      await assert.rejects(d.lock("ab").acquire({ signal: AbortSignal.abort() }));
      assert.equal(await holder.release(), "released");
      assert.equal(await d.info("ab"), null);
      d.close();
    });

    await t.test("aborting a wait without CLIENT UNBLOCK rights (ACL) leaves nothing either", async (t2) => {
      await server.client().call("ACL", "SETUSER", "nounblock", "on", ">pw", "~*", "&*", "+@all", "-client|unblock");
      const limited = await flavour.make(t2, server.port, { username: "nounblock", password: "pw" });
      const d = new Dlock(limited);
      const holder = await d.lock("acl").acquire();
      const ac = new AbortController();
      const waiting = d.lock("acl").acquire({ signal: ac.signal });
      assert.ok(await waitUntil(async () => (await d.info("acl")).waiters.length === 1));
      ac.abort();
      await assert.rejects(waiting, { name: "AbortError" });
      assert.ok(await waitUntil(async () => (await d.info("acl")).waiters.length === 0));
      assert.deepEqual((await d.info("acl")).holders.map((x) => x.owner), [holder.owner]);
      await holder.release();
      d.close();
    });

    await t.test("withLock: re-entry in scope, one owner per acquire, release on throw", async () => {
      const d = new Dlock(r);
      // A task started outside the scope is another owner, also in this process.
      let go;
      const other = new Promise((resolve) => { go = resolve; }).then(() => d.lock("re").tryAcquire());
      await d.withLock("re", async (signal, outer) => {
        assert.equal(signal, outer.signal);
        go();
        assert.equal(await other, null);
        const inner = await d.lock("re").acquire();
        assert.equal(inner.token, outer.token);
        assert.equal(inner.owner, outer.owner);
        await d.withLock("re", async (_s, h) => assert.equal(h.token, outer.token));
        assert.equal(await inner.release(), "still-held");
        assert.equal((await d.info("re")).holders[0].count, 1);
      });
      assert.equal(await d.info("re"), null);
      await assert.rejects(d.withLock("re", async () => { throw new Error("boom"); }), /boom/);
      assert.equal(await d.info("re"), null, "released although the callback threw");
      // Lost while the callback ran: withLock throws LockLost.
      await assert.rejects(
        d.withLock("re", { lease: 100 }, async (signal) => {
          await new Promise((resolve) => signal.addEventListener("abort", resolve));
          return 1;
        }),
        (e) => e instanceof LockLost && e.reason === "expired",
      );
      d.close();
    });
  });
}

test("a 10 s wait under node-redis' 5 s command timeout", async (t) => {
  const server = await startServer(t);
  const r = await NODE_REDIS2.make(t, server.port); // default commandOptions.timeout: 5000
  const d = new Dlock(r);
  t.after(() => d.close());
  const holder = await d.lock("slow").acquire();
  const start = Date.now();
  const waiting = d.lock("slow").acquire({ timeout: 30000 });
  await sleep(10000);
  assert.equal(await holder.release(), "released");
  const h = await waiting;
  // Node's timers run on a loop clock cached to the millisecond, so sleep(10000)
  // may end a millisecond or two early by Date.now() (seen in CI: 9999 ms).
  assert.ok(Date.now() - start >= 9990);
  assert.ok(h.token > holder.token);
  assert.equal(await h.release(), "released");
});

test("a wait longer than ioredis' commandTimeout", async (t) => {
  const server = await startServer(t);
  const r = await IOREDIS2.make(t, server.port, { commandTimeout: 1000 });
  const d = new Dlock(r);
  t.after(() => d.close());
  const holder = await d.lock("slow").acquire();
  const waiting = d.lock("slow").acquire({ timeout: 30000 });
  await sleep(2500);
  assert.equal(await holder.release(), "released");
  const h = await waiting;
  assert.ok(h.token > holder.token);
  assert.equal(await h.release(), "released");
});

test("a 2.5 s wait under GLIDE's 250 ms request timeout", async (t) => {
  const server = await startServer(t);
  const r = await GLIDE.make(t, server.port); // requestTimeout left at GLIDE's 250 ms
  const d = new Dlock(r);
  t.after(() => d.close());
  const holder = await d.lock("slow").acquire();
  const start = Date.now();
  const waiting = d.lock("slow").acquire({ timeout: 30000 });
  await sleep(2500);
  assert.equal(await holder.release(), "released");
  const h = await waiting;
  assert.ok(Date.now() - start >= 2500);
  assert.ok(h.token > holder.token);
  assert.equal(await h.release(), "released");
  // A latch wait too.
  const latch = d.latch("gate");
  assert.equal(await latch.trySetCount(1), true);
  const opened = latch.wait({ timeout: 30000 });
  await sleep(1000);
  await latch.countDown();
  assert.equal(await opened, true);
});

for (const flavour of [IOREDIS2, NODE_REDIS2, GLIDE]) {
  test(`no head-of-line blocking: waits never stall the shared connection (${flavour.name})`, async (t) => {
    const server = await startServer(t);
    const r = await flavour.make(t, server.port);
    const d = new Dlock(r, { watchdogLease: 400 }); // renews every 133 ms on r
    t.after(() => d.close());
    const busy = await d.lock("busy").acquire();
    const waiters = [1, 2, 3].map(() => d.lock("busy").acquire({ timeout: LONG }));
    assert.ok(await waitUntil(async () => (await d.info("busy")).waiters.length === 3));
    const mine = await d.lock("mine").acquire();
    const worst = [];
    for (let i = 0; i < 20; i++) {
      const t0 = Date.now();
      await d.execute(undefined, "PING");
      worst.push(Date.now() - t0);
      await sleep(100);
    }
    assert.ok(Math.max(...worst) < 1000, `PING took up to ${Math.max(...worst)} ms`);
    assert.equal(mine.signal.aborted, false, "renewals went through while others waited");
    assert.equal(busy.signal.aborted, false);
    assert.equal(await mine.release(), "released");
    await busy.release();
    await Promise.all(waiters.map(async (w) => assert.equal(await (await w).release(), "released")));
  });
}

test("N workers increment a counter: no update lost, tokens strictly grow", async (t) => {
  const server = await startServer(t);
  for (const flavour of [IOREDIS, NODE_REDIS3, GLIDE]) {
    const r = await flavour.make(t, server.port);
    const d = new Dlock(r);
    const key = `counter-${flavour.name}`;
    const tokens = [];
    const WORKERS = 8;
    const ROUNDS = 15;
    await Promise.all(Array.from({ length: WORKERS }, async () => {
      for (let i = 0; i < ROUNDS; i++) {
        await d.withLock("{c}:lock", async (_signal, hold) => {
          tokens.push(hold.token);
          const v = Number((await d.execute("{c}:lock", "GET", `{c}:${key}`)) ?? 0);
          await sleep(1);
          await hold.fenced("SET", `{c}:${key}`, String(v + 1));
        });
      }
    }));
    assert.equal(Number(await d.execute("{c}:lock", "GET", `{c}:${key}`)), WORKERS * ROUNDS);
    for (let i = 1; i < tokens.length; i++) assert.ok(tokens[i] > tokens[i - 1], `token ${i}`);
    d.close();
  }
});
