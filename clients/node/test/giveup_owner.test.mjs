// What a new user hit (issue 35), each against real servers: a fixed owner per acquire
// that another process can take over and release; hold.isAcquired; a zero lease refused
// everywhere before anything is sent; the "is the module loaded?" hint; and a try that
// gives up freeing its queue place at once (DLOCK.CANCEL).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { Dlock, Election, InvalidArgument, ModuleNotLoaded, RedLock, UnknownCommand, runOnce } from "dlock-redis";
import { FLAVOURS, startServer, sleep, waitUntil } from "./setup.mjs";

const run = promisify(execFile);
const root = path.join(path.dirname(fileURLToPath(import.meta.url)), "..");
const [, IOREDIS, , NODE_REDIS3, GLIDE] = FLAVOURS;

async function hasCancel(r) {
  const info = await r.call("COMMAND", "INFO", "DLOCK.CANCEL");
  return Array.isArray(info) && info[0] !== null && info[0] !== undefined;
}

test("a fixed owner: another process takes the hold over and releases it", async (t) => {
  const server = await startServer(t);
  const r = await IOREDIS.make(t, server.port);
  const d = new Dlock(r);
  t.after(() => d.close());
  // Another process acquires as "job-42" with a long lease and exits holding it.
  const script = `
    import Redis from "ioredis";
    import { Dlock } from "dlock-redis";
    const r = new Redis(${server.port}, "127.0.0.1");
    const h = await new Dlock(r).lock("report").acquire({ owner: "job-42", lease: 60000 });
    console.log(h.owner, String(h.token));
    r.disconnect();`;
  const { stdout } = await run(process.execPath, ["--input-type=module", "-e", script], { cwd: root, timeout: 20000 });
  const [owner, token] = stdout.trim().split(" ");
  assert.equal(owner, "job-42");
  assert.equal(await d.lock("report").attach("someone-else"), null);
  assert.equal(await d.lock("elsewhere").attach("job-42"), null);
  const h = await d.lock("report").attach("job-42");
  assert.ok(h, "attach found the hold");
  assert.equal(h.owner, "job-42");
  assert.equal(String(h.token), token);
  assert.equal(h.isAcquired, true);
  assert.equal(await h.check(), true);
  assert.equal(await h.release(), "released");
  assert.equal(h.isAcquired, false);
  assert.equal(await d.info("report"), null);
  // The same with a read side of an rw lock and a semaphore hold of 2 permits.
  await d.rwLock("rw").read().acquire({ owner: "reader-1" });
  assert.equal(await d.rwLock("rw").write().attach("reader-1"), null, "a write lock does not attach a read hold");
  assert.equal(await (await d.rwLock("rw").read().attach("reader-1")).release(), "released");
  await d.semaphore("sem", 3).acquire({ owner: "sem-1", permits: 2 });
  const s = await d.semaphore("sem", 3).attach("sem-1", { lease: 5000 });
  assert.equal(s.permits, 2);
  assert.equal(await s.release(), "released");
  assert.equal(await d.info("sem"), null);
  await assert.rejects(d.lock("x").acquire({ owner: "" }), { name: "InvalidArgument", argument: "owner" });
});

test("isAcquired follows release and loss", async (t) => {
  const server = await startServer(t);
  const r = await GLIDE.make(t, server.port);
  const d = new Dlock(r, { watchdogLease: 600 });
  t.after(() => d.close());
  const h = await d.lock("a").acquire();
  assert.equal(h.isAcquired, true);
  await d.forceRelease("a");
  assert.ok(await waitUntil(() => !h.isAcquired), "a force-released hold is not acquired");
  const e = await d.lock("b").acquire({ lease: 150 });
  assert.ok(await waitUntil(() => !e.isAcquired), "an explicit lease that ended");
  const g = await d.lock("c").acquire();
  await g.release();
  assert.equal(g.isAcquired, false);
});

test("a zero (or negative, NaN) lease is refused everywhere, before anything is sent", async (t) => {
  const server = await startServer(t);
  const r = await IOREDIS.make(t, server.port);
  const d = new Dlock(r);
  t.after(() => d.close());
  const clear = /lease must be a number of milliseconds from 1 to 2\^40, got (0|-5|NaN)/;
  for (const lease of [0, -5, NaN]) {
    await assert.rejects(d.lock("z").acquire({ lease }), clear);
    await assert.rejects(d.lock("z").tryAcquire({ lease }), clear);
    await assert.rejects(d.fairLock("z").tryAcquire({ lease }), clear);
    await assert.rejects(d.semaphore("z", 2).tryAcquire({ lease }), clear);
    await assert.rejects(d.rwLock("z").write().tryAcquire({ lease }), clear);
    await assert.rejects(d.lock("z").attach("o", { lease }), clear);
    await assert.rejects(new RedLock([d], "z").tryAcquire({ lease }), clear);
  }
  assert.throws(() => new Dlock(r, { watchdogLease: 0 }), /watchdogLease must be a number of milliseconds from 1 to 2\^40, got 0/);
  assert.throws(() => new RedLock([r], "z", { watchdogLease: 0 }), /watchdogLease must be .* from 1 to 2\^40, got 0/);
  assert.throws(() => new Election(d, "z", { lease: 0 }), /lease must be a number of milliseconds from 1/);
  await assert.rejects(runOnce(d, "z", { atMostFor: 0 }, () => 1), /atMostFor must be .* from 1/);
  for (const lease of [0, -5]) await assert.rejects(d.lock("z").acquire({ lease }), InvalidArgument);
  const h = await d.lock("held").acquire({ lease: 5000 });
  await assert.rejects(h.renew(0), clear);
  assert.equal(await h.release(), "released");
  assert.equal(await d.info("z"), null, "nothing was sent for z");
});

/** A redis-server without the module, on a free port; stopped by PID. */
async function plainServer(t) {
  const dir = mkdtempSync(path.join(os.tmpdir(), "dlock-node-plain-"));
  const port = await new Promise((resolve) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
  const child = spawn(process.env.REDIS_SERVER || "redis-server",
    ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--dir", dir], { stdio: "ignore" });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) child.kill("SIGTERM");
    await exited;
    rmSync(dir, { recursive: true, force: true });
  });
  return port;
}

for (const flavour of [IOREDIS, NODE_REDIS3, GLIDE]) {
  test(`module not loaded: the error says how to check and load it (${flavour.name})`, async (t) => {
    const port = await plainServer(t);
    let r;
    assert.ok(await waitUntil(async () => {
      try {
        r = await flavour.make(t, port);
        return (await new Dlock(r).execute(undefined, "PING")) === "PONG";
      } catch {
        return false;
      }
    }), "the plain server answers");
    const d = new Dlock(r);
    t.after(() => d.close());
    const e = await d.lock("k").acquire({ timeout: 1000 }).catch((x) => x);
    assert.ok(e instanceof UnknownCommand, String(e));
    assert.equal(e.code, "UNKNOWNCOMMAND");
    assert.equal(e.command, "DLOCK.ACQUIRE");
    assert.match(e.message, /unknown command/i);
    assert.match(e.message, /is the dlock module loaded/);
    assert.match(e.message, /MODULE LIST/);
    assert.match(e.message, /--loadmodule/);
    assert.match(e.serverMessage, /^ERR unknown command/);
    // RedLock does not retry until its timeout on servers that cannot run the command.
    const t0 = performance.now();
    await assert.rejects(new RedLock([d], "k").acquire({ timeout: 5000 }), /MODULE LIST/);
    assert.ok(performance.now() - t0 < 2000);
    // Commands that are not dlock's keep the server's text.
    const other = await d.execute("k", "NOSUCHCOMMAND").catch((x) => x);
    assert.ok(other instanceof UnknownCommand);
    assert.doesNotMatch(other.message, /dlock module/);
  });
}

test("a fair try that gives up frees its place at once (DLOCK.CANCEL)", async (t) => {
  const server = await startServer(t);
  const r = await IOREDIS.make(t, server.port);
  if (!(await hasCancel(r))) {
    t.skip(`the module at ${process.env.DLOCK_MODULE ?? "target/release"} has no DLOCK.CANCEL`);
    return;
  }
  const d = new Dlock(r);
  t.after(() => d.close());
  for (const how of ["timeout", "tryAcquire", "abort", "campaign", "glide"]) {
    const key = `fair-${how}`;
    const holder = await d.fairLock(key).acquire();
    // A second owner queues, then gives up.
    if (how === "timeout") {
      assert.equal(await d.fairLock(key).tryAcquire({ timeout: 300 }), null);
    } else if (how === "glide") {
      const g = new Dlock(await GLIDE.make(t, server.port));
      assert.equal(await g.fairLock(key).tryAcquire({ timeout: 300 }), null);
      g.close();
    } else if (how === "tryAcquire") {
      assert.equal(await d.fairLock(key).tryAcquire(), null);
    } else if (how === "abort") {
      const ac = new AbortController();
      const p = d.fairLock(key).acquire({ signal: ac.signal });
      assert.ok(await waitUntil(async () => (await d.info(key)).waiters.length === 1));
      ac.abort(new Error("gave up"));
      await assert.rejects(p, /gave up/);
    } else {
      const el = new Election(d, key);
      await assert.rejects(el.campaign({ timeout: 300 }), /not elected/);
      el.close();
    }
    // DLOCK.CANCEL goes in the background (it never delays the caller): gone within 0.5 s.
    const left = async () => (await d.info(key)).waiters.length === 0;
    assert.ok(await waitUntil(left, 500), `${how}: no place is left within 0.5 s: ${JSON.stringify((await d.info(key)).waiters)}`);
    // A third owner waits; when the holder lets go it is served at once, not after 5 s.
    const third = d.fairLock(key).acquire({ timeout: 20000 });
    assert.ok(await waitUntil(async () => (await d.info(key)).waiters.length === 1));
    const t0 = performance.now();
    await holder.release();
    const h = await third;
    const ms = performance.now() - t0;
    console.log(`FIGURE next fair owner served after a ${how} give-up (ms after the release): ${ms.toFixed(1)}`);
    assert.ok(ms < 1000, `${how}: the next owner was served ${ms.toFixed(0)} ms after the release`);
    await h.release();
  }
});

test("a give-up on a module without DLOCK.CANCEL still answers as before", async (t) => {
  const server = await startServer(t);
  const r = await IOREDIS.make(t, server.port);
  const d = new Dlock(r);
  t.after(() => d.close());
  const holder = await d.fairLock("f").acquire();
  assert.equal(await d.fairLock("f").tryAcquire({ timeout: 100 }), null);
  await assert.rejects(d.lock("f2").acquire({ timeout: 0, signal: AbortSignal.abort() }));
  await holder.release();
  await sleep(0);
});
