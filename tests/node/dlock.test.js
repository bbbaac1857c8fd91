"use strict";
// Every dlock command from Node.js (ioredis), with no helper library, against a
// real redis-server with the module. Event-driven waits, generous bounds.

const { test } = require("node:test");
const assert = require("node:assert/strict");
const {
  startServer, sleep, waitUntil, flatToObject, lockInfo, blockedWaiters, subscribe,
} = require("./helpers");

const LONG = 20000; // ms: a WAIT that must end because of an event, never by timeout

test("ACQUIRE: grant, reentrant grant, nil", async (t) => {
  const r = (await startServer(t)).client();
  const t1 = await r.call("DLOCK.ACQUIRE", "orders", "worker-1", "PX", 60000);
  assert.equal(typeof t1, "number");
  assert.ok(t1 > 0);
  assert.equal(await r.call("DLOCK.ACQUIRE", "orders", "worker-1", "PX", 60000), t1);
  const info = await lockInfo(r, "orders");
  assert.equal(info.kind, "mutex");
  assert.deepEqual(
    info.holders.map((h) => [h.owner, h.count, h.token]),
    [["worker-1", 2, t1]],
  );
  assert.equal(await r.call("DLOCK.ACQUIRE", "orders", "worker-2"), null);
  assert.deepEqual((await lockInfo(r, "orders")).waiters, []);
});

test("ACQUIRE WAIT: served when another client releases", async (t) => {
  const server = await startServer(t);
  const r = server.client();
  const t1 = await r.call("DLOCK.ACQUIRE", "orders", "worker-1", "PX", 60000);
  const start = Date.now();
  const waiting = server.client().call("DLOCK.ACQUIRE", "orders", "worker-2", "WAIT", LONG);
  assert.ok(await waitUntil(async () => (await blockedWaiters(r, "orders")) === 1));
  assert.equal(await r.call("DLOCK.RELEASE", "orders", "worker-1"), 1);
  const t2 = await waiting;
  assert.ok(t2 > t1);
  assert.ok(Date.now() - start < LONG / 2, "served by the release, not the timeout");
  assert.deepEqual((await lockInfo(r, "orders")).holders.map((h) => h.owner), ["worker-2"]);
});

test("ACQUIRE WAIT: times out with nil and leaves no waiter", async (t) => {
  const r = (await startServer(t)).client();
  await r.call("DLOCK.ACQUIRE", "orders", "worker-1", "PX", 60000);
  assert.equal(await r.call("DLOCK.ACQUIRE", "orders", "worker-2", "WAIT", 200), null);
  assert.deepEqual((await lockInfo(r, "orders")).waiters, []);
});

test("RWACQUIRE: shared readers, exclusive writer, writer waits", async (t) => {
  const server = await startServer(t);
  const r = server.client();
  assert.ok((await r.call("DLOCK.RWACQUIRE", "doc", "a", "READ")) > 0);
  assert.ok((await r.call("DLOCK.RWACQUIRE", "doc", "b", "READ", "PX", 60000)) > 0);
  assert.equal(await r.call("DLOCK.RWACQUIRE", "doc", "w", "WRITE"), null);
  assert.equal((await lockInfo(r, "doc")).kind, "rw");
  const writing = server.client().call("DLOCK.RWACQUIRE", "doc", "w", "WRITE", "WAIT", LONG);
  assert.ok(await waitUntil(async () => (await blockedWaiters(r, "doc")) === 1));
  assert.equal(await r.call("DLOCK.RWACQUIRE", "doc", "c", "READ"), null); // writer preference
  assert.equal(await r.call("DLOCK.RELEASE", "doc", "a", "READ"), 1);
  assert.equal(await r.call("DLOCK.RELEASE", "doc", "b"), 1);
  assert.ok((await writing) > 0);
  assert.deepEqual(
    (await lockInfo(r, "doc")).holders.map((h) => [h.owner, h.mode]),
    [["w", "write"]],
  );
  assert.equal(await r.call("DLOCK.RELEASE", "doc", "w", "WRITE"), 1);
});

test("FAIRACQUIRE: served in arrival order", async (t) => {
  const r = (await startServer(t)).client();
  const t1 = await r.call("DLOCK.FAIRACQUIRE", "queue", "first", "PX", 60000);
  assert.ok(t1 > 0);
  assert.equal(await r.call("DLOCK.FAIRACQUIRE", "queue", "second"), null);
  assert.equal(await r.call("DLOCK.FAIRACQUIRE", "queue", "third"), null);
  const info = await lockInfo(r, "queue");
  assert.equal(info.kind, "fair");
  assert.deepEqual(
    info.waiters.map((w) => [w.owner, w.state]),
    [["second", "queued"], ["third", "queued"]],
  );
  assert.equal(await r.call("DLOCK.RELEASE", "queue", "first"), 1);
  assert.equal(await r.call("DLOCK.FAIRACQUIRE", "queue", "third"), null);
  assert.ok((await r.call("DLOCK.FAIRACQUIRE", "queue", "second")) > t1);
});

test("RELEASE: 0 while reentrant, 1, then NOTHELD", async (t) => {
  const r = (await startServer(t)).client();
  await r.call("DLOCK.ACQUIRE", "orders", "w");
  await r.call("DLOCK.ACQUIRE", "orders", "w");
  assert.equal(await r.call("DLOCK.RELEASE", "orders", "w"), 0);
  assert.equal(await r.call("DLOCK.RELEASE", "orders", "w"), 1);
  assert.equal(await r.exists("orders"), 0);
  await assert.rejects(r.call("DLOCK.RELEASE", "orders", "w"), /^ReplyError: NOTHELD/);
});

test("RENEW: 1 while held, 0 when not", async (t) => {
  const r = (await startServer(t)).client();
  await r.call("DLOCK.ACQUIRE", "orders", "w", "PX", 5000);
  assert.equal(await r.call("DLOCK.RENEW", "orders", "w", "PX", 600000), 1);
  assert.ok((await lockInfo(r, "orders")).holders[0].ttl > 60000);
  assert.equal(await r.call("DLOCK.RENEW", "orders", "someone-else"), 0);
  await r.call("DLOCK.RELEASE", "orders", "w");
  assert.equal(await r.call("DLOCK.RENEW", "orders", "w"), 0);
});

test("INFO: nil, then a flat field/value list", async (t) => {
  const server = await startServer(t);
  const r = server.client();
  assert.equal(await r.call("DLOCK.INFO", "nothing"), null);
  const tok = await r.call("DLOCK.ACQUIRE", "orders", "worker-1", "PX", 60000);
  const waiting = server.client().call("DLOCK.ACQUIRE", "orders", "worker-2", "WAIT", LONG);
  assert.ok(await waitUntil(async () => (await blockedWaiters(r, "orders")) === 1));
  const raw = await r.call("DLOCK.INFO", "orders");
  assert.ok(Array.isArray(raw));
  const info = flatToObject(raw);
  assert.equal(info.kind, "mutex");
  assert.equal(info.token, tok);
  const [holder] = info.holders.map(flatToObject);
  assert.equal(holder.owner, "worker-1");
  assert.equal(holder.mode, "exclusive");
  assert.equal(holder.count, 1);
  assert.ok(holder.ttl > 0 && holder.ttl <= 60000);
  assert.ok(holder.expires_at > 0);
  const [waiter] = info.waiters.map(flatToObject);
  assert.deepEqual([waiter.owner, waiter.mode, waiter.state], ["worker-2", "exclusive", "blocked"]);
  await r.call("DLOCK.RELEASE", "orders", "worker-1");
  assert.ok((await waiting) > tok);
});

test("FORCERELEASE: drops the holds, serves the waiter", async (t) => {
  const server = await startServer(t);
  const r = server.client();
  const tok = await r.call("DLOCK.ACQUIRE", "orders", "w", "PX", 60000);
  const waiting = server.client().call("DLOCK.ACQUIRE", "orders", "next", "WAIT", LONG);
  assert.ok(await waitUntil(async () => (await blockedWaiters(r, "orders")) === 1));
  assert.equal(await r.call("DLOCK.FORCERELEASE", "orders"), 1);
  assert.ok((await waiting) > tok);
  await assert.rejects(r.call("DLOCK.RELEASE", "orders", "w"), /NOTHELD/);
  assert.equal(await r.call("DLOCK.RELEASE", "orders", "next"), 1);
  assert.equal(await r.call("DLOCK.FORCERELEASE", "orders"), 0);
});

test("notifications: released and expired on dlock:{key}", async (t) => {
  const server = await startServer(t);
  const r = server.client();
  const sub = await subscribe(server, "dlock:{orders}");
  await r.call("DLOCK.ACQUIRE", "orders", "w");
  await r.call("DLOCK.ACQUIRE", "orders", "w");
  assert.equal(await r.call("DLOCK.RELEASE", "orders", "w"), 0);
  assert.equal(await sub.next(300), null); // a partial release publishes nothing
  assert.equal(await r.call("DLOCK.RELEASE", "orders", "w"), 1);
  assert.deepEqual(await sub.next(), ["dlock:{orders}", "released"]);

  const start = Date.now();
  await r.call("DLOCK.ACQUIRE", "orders", "w", "PX", 300);
  assert.deepEqual(await sub.next(15000), ["dlock:{orders}", "expired"]);
  assert.ok(Date.now() - start >= 250);
  assert.equal(await r.call("DLOCK.INFO", "orders"), null);
  await sleep(0);
});
