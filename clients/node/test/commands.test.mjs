// Every lock kind and command through the package, on ioredis and on node-redis with
// RESP2 and RESP3, against a real server with the module.
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  Dlock, AcquireTimeout, Deadlock, Fenced, InvalidArgument, NoReplicas, NotDurable, NotHeld,
  QueueFull, WrongKind, channelFor, keySlot, parseCycle,
} from "dlock-redis";
import { FLAVOURS, startServer, waitUntil } from "./setup.mjs";

const LONG = 20000;

test("channelFor and keySlot", () => {
  assert.equal(channelFor("orders"), "dlock:{orders}");
  assert.equal(channelFor("{user1}:lock"), "dlock:{user1}:lock");
  assert.equal(keySlot("foo"), 12182);
  assert.equal(keySlot("{user1}:a"), keySlot("user1"));
});

test("parseCycle reads the steps of a DEADLOCK cycle, binary-safe", () => {
  const steps = parseCycle(
    'DEADLOCK cycle: "B" waits for "a\\x2cb" on "or\\"ders"; "a\\x2cb" waits for "B" on "st\\xffock" (nothing was queued)',
  );
  assert.deepEqual(
    steps.map((s) => [s.owner.toString("latin1"), s.waitsFor.toString("latin1"), s.key.toString("latin1")]),
    [["B", "a,b", 'or"ders'], ["a,b", "B", "st\xffock"]],
  );
  assert.deepEqual(parseCycle("DEADLOCK another reader already waits to upgrade"), []);
});

for (const flavour of FLAVOURS) {
  test(`every command through ${flavour.name}`, async (t) => {
    const server = await startServer(t);
    const r = await flavour.make(t, server.port);
    const d = new Dlock(r);
    t.after(() => d.close());
    const blocked = async (key) => {
      const info = await d.info(key);
      return info ? info.waiters.filter((w) => w.state === "blocked").length : 0;
    };

    await t.test("mutex: acquire, tryAcquire, wait served by a release", async () => {
      const a = await d.lock("m").acquire();
      assert.equal(typeof a.token, "bigint");
      assert.equal(await d.lock("m").tryAcquire(), null);
      await assert.rejects(d.lock("m").acquire({ timeout: 100 }), AcquireTimeout);
      const waiting = d.lock("m").acquire({ timeout: LONG });
      assert.ok(await waitUntil(async () => (await blocked("m")) === 1));
      assert.equal(await a.release(), "released");
      const b = await waiting;
      assert.ok(b.token > a.token);
      const info = await d.info("m");
      assert.equal(info.kind, "mutex");
      assert.deepEqual(info.holders.map((h) => h.owner), [b.owner]);
      assert.equal(await b.release(), "released");
      assert.equal(await b.release(), "released", "a second release answers the same");
      assert.equal(await d.info("m"), null);
    });

    await t.test("fair lock: served in the order owners first asked", async () => {
      const first = await d.fairLock("f").acquire();
      const order = [];
      const w1 = d.fairLock("f").acquire({ timeout: LONG }).then((h) => { order.push(1); return h; });
      assert.ok(await waitUntil(async () => (await d.info("f")).waiters.length === 1));
      const w2 = d.fairLock("f").acquire({ timeout: LONG }).then((h) => { order.push(2); return h; });
      assert.ok(await waitUntil(async () => (await d.info("f")).waiters.length === 2));
      assert.equal((await d.info("f")).kind, "fair");
      await first.release();
      const h1 = await w1;
      await h1.release();
      const h2 = await w2;
      await h2.release();
      assert.deepEqual(order, [1, 2]);
      // A try that was not granted gives up its queue place (DLOCK.CANCEL, in the
      // background); on a module without CANCEL the server keeps it, and the same object
      // resumes it.
      const cancels = (await d.execute(undefined, "COMMAND", "INFO", "DLOCK.CANCEL"))?.[0] != null;
      const places = async () => (await d.info("f2")).waiters.length;
      const fair = d.fairLock("f2");
      const holder = await d.fairLock("f2").acquire();
      assert.equal(await fair.tryAcquire(), null);
      assert.ok(await waitUntil(async () => (await places()) === (cancels ? 0 : 1)));
      assert.equal(await fair.tryAcquire(), null);
      assert.ok(await waitUntil(async () => (await places()) === (cancels ? 0 : 1)), "never a second place");
      await holder.release();
      const resumed = await fair.tryAcquire();
      assert.ok(resumed);
      assert.deepEqual((await d.info("f2")).waiters, []);
      await resumed.release();
    });

    await t.test("rw lock: shared readers, exclusive writer, writer preference, upgrade deadlock", async () => {
      const rw = d.rwLock("rw");
      const r1 = await rw.read().acquire();
      const r2 = await rw.read().acquire();
      assert.equal(await rw.write().tryAcquire(), null);
      const writing = rw.write().acquire({ timeout: LONG });
      assert.ok(await waitUntil(async () => (await blocked("rw")) === 1));
      assert.equal(await rw.read().tryAcquire(), null, "a waiting writer goes first");
      await r1.release();
      await r2.release();
      const w = await writing;
      assert.deepEqual((await d.info("rw")).holders.map((h) => h.mode), ["write"]);
      assert.equal(await w.release(), "released");
      // Two readers both waiting to upgrade: the second gets DEADLOCK at once.
      const a = await rw.read().acquire();
      const b = await rw.read().acquire();
      // (on connections of their own: a blocked command must not hold up the shared one)
      const up = (h) => server.client().call("DLOCK.RWACQUIRE", "rw", h.owner, "WRITE", "WAIT", LONG);
      const upA = up(a);
      assert.ok(await waitUntil(async () => (await blocked("rw")) === 1));
      await assert.rejects(up(b), /^ReplyError: DEADLOCK/);
      await assert.rejects(
        d.execute("rw", "DLOCK.RWACQUIRE", "rw", b.owner, "WRITE"),
        (e) => e instanceof Deadlock && e.code === "DEADLOCK",
      );
      await b.release();
      assert.ok(Number(await upA) > 0);
      await d.forceRelease("rw");
      // Across locks: A holds x and waits for y; B holds y and asks for x.
      await d.execute("x", "DLOCK.ACQUIRE", "x", "A");
      await d.execute("y", "DLOCK.ACQUIRE", "y", "B");
      const waitA = server.client().call("DLOCK.ACQUIRE", "y", "A", "WAIT", LONG);
      assert.ok(await waitUntil(async () => (await blocked("y")) === 1));
      await assert.rejects(
        d.execute("x", "DLOCK.ACQUIRE", "x", "B", "WAIT", LONG),
        (e) =>
          e instanceof Deadlock &&
          e.keys.map(String).join() === "x,y" &&
          e.owners.map(String).join() === "B,A",
      );
      await d.forceRelease("y");
      assert.ok(Number(await waitA) > 0);
      await d.forceRelease("x");
      await d.forceRelease("y");
    });

    await t.test("semaphore: limit, permits, FIFO", async () => {
      const sem = d.semaphore("s", 3);
      const a = await sem.acquire({ permits: 2 });
      assert.equal(a.permits, 2);
      const b = await sem.acquire();
      assert.equal(await sem.tryAcquire(), null);
      const info = await d.info("s");
      assert.equal(info.kind, "semaphore");
      assert.equal(Number(info.limit), 3);
      assert.equal(Number(info.available), 0);
      const waiting = sem.acquire({ permits: 2, timeout: LONG });
      assert.ok(await waitUntil(async () => (await blocked("s")) === 1));
      await b.release();
      assert.equal(await blocked("s"), 1, "2 permits wanted, 1 free");
      await a.release();
      const c = await waiting;
      assert.equal(await c.release(), "released");
      await assert.rejects(d.semaphore("s2", 2).acquire().then(() => d.semaphore("s2", 5).acquire()), InvalidArgument);
      await d.forceRelease("s2");
    });

    await t.test("latch: set, count down, wait", async () => {
      const l = d.latch("l");
      assert.equal(await l.trySetCount(2), true);
      assert.equal(await l.trySetCount(5), false);
      assert.equal(await l.count(), 2);
      assert.equal(await l.wait({ timeout: 50 }), false);
      const waiting = l.wait({ timeout: LONG });
      assert.equal(await l.countDown(), 1);
      assert.equal(await l.countDown(), 0);
      assert.equal(await waiting, true);
      assert.equal(await l.count(), 0);
      assert.equal(await l.wait({ timeout: 0 }), true);
    });

    await t.test("check, fenced, renew, forceRelease, errors", async () => {
      const h = await d.lock("{acct}:lock").acquire({ lease: 60000 });
      assert.equal(await h.check(), true);
      assert.equal(await h.fenced("SET", "{acct}:balance", "10"), "OK");
      assert.equal(await h.renew(30000), true);
      // The inner command's errors stay its own.
      await assert.rejects(h.fenced("INCR", "{acct}:balance", "x"), (e) => !(e instanceof WrongKind));
      assert.equal(await d.forceRelease("{acct}:lock"), true);
      assert.equal(await d.forceRelease("{acct}:lock"), false);
      assert.equal(await h.check(), false);
      await assert.rejects(h.fenced("SET", "{acct}:balance", "20"), (e) => e instanceof Fenced && e.code === "FENCED");
      assert.equal(await h.renew(), false);
      assert.equal(h.signal.aborted, true);
      assert.equal(h.signal.reason.code, "LOCKLOST");
      assert.equal(await h.release(), "lost");
      // Kind and owner errors.
      await d.lock("k").acquire();
      await assert.rejects(d.fairLock("k").tryAcquire(), (e) => e instanceof WrongKind && e.code === "WRONGKIND");
      await assert.rejects(d.execute("k", "DLOCK.RELEASE", "k", "nobody"), NotHeld);
      await assert.rejects(d.execute("k", "DLOCK.ACQUIRE", "k", "x", "PX", "soon"), InvalidArgument);
      await d.forceRelease("k");
    });

    await t.test("BIND and LOCKDELAY are passed on", async () => {
      const h = await d.lock("b").acquire({ bind: true, lockDelay: 100, lease: 60000 });
      assert.equal((await d.info("b")).holders.length, 1);
      await h.release();
    });

    await t.test("QUEUEFULL", async () => {
      await d.execute(undefined, "CONFIG", "SET", "dlock.max-queue", "1");
      try {
        const h = await d.lock("q").acquire();
        const waiting = d.lock("q").acquire({ timeout: LONG });
        assert.ok(await waitUntil(async () => (await blocked("q")) === 1));
        await assert.rejects(d.lock("q").acquire({ timeout: LONG }), (e) => e instanceof QueueFull && e.code === "QUEUEFULL");
        await h.release();
        await (await waiting).release();
      } finally {
        await d.execute(undefined, "CONFIG", "SET", "dlock.max-queue", "10000");
      }
    });

    await t.test("replicas: too few acknowledge: released, NotDurable; NOREPLICAS", async () => {
      await assert.rejects(
        d.lock("r").acquire({ replicas: 1, replicasTimeout: 100 }),
        (e) => e instanceof NotDurable && e.code === "NOTDURABLE" && e.acknowledged === 0,
      );
      assert.equal(await d.info("r"), null, "no hold left behind");
      await d.execute(undefined, "CONFIG", "SET", "min-replicas-to-write", "1");
      try {
        await assert.rejects(d.lock("r").tryAcquire(), (e) => e instanceof NoReplicas && e.code === "NOREPLICAS");
      } finally {
        await d.execute(undefined, "CONFIG", "SET", "min-replicas-to-write", "0");
      }
      assert.equal(await d.info("r"), null);
    });
  });
}
