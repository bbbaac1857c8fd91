// A 3-master cluster through ioredis' Cluster, node-redis' cluster and GLIDE's
// GlideClusterClient (its 250 ms request timeout left as it is): module commands
// go straight to the key's master (no MOVED: errorstat_MOVED stays 0), waits included;
// a force-release is told at once through the sharded channel.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Dlock, channelFor } from "dlock-redis";
import { Cluster, GlideClusterClient, createCluster, startCluster, waitUntil } from "./setup.mjs";

const KEYS = ["alpha", "beta", "gamma", "delta", "{acct}:lock"];

async function movedErrors(nodes) {
  let total = 0;
  for (const n of nodes) {
    const info = String(await n.client().call("INFO", "errorstats"));
    const m = /errorstat_MOVED:count=(\d+)/.exec(info);
    total += m ? Number(m[1]) : 0;
  }
  return total;
}

async function shardSubscribers(nodes, channel) {
  let total = 0;
  for (const n of nodes) {
    const [, count] = await n.client().call("PUBSUB", "SHARDNUMSUB", channel);
    total += Number(count);
  }
  return total;
}

test("3-master cluster: ioredis Cluster, node-redis cluster, GLIDE cluster", async (t) => {
  const nodes = await startCluster(t, 3);
  const seeds = nodes.map((n) => ({ host: "127.0.0.1", port: n.port }));
  const io = new Cluster([seeds[0]]);
  io.on("error", () => {});
  t.after(() => io.disconnect());
  const nr = createCluster({ rootNodes: [{ socket: seeds[0] }] });
  nr.on("error", () => {});
  await nr.connect();
  t.after(() => nr.destroy());

  const glide = await GlideClusterClient.createClient({ addresses: [seeds[0]] });
  t.after(() => glide.close());

  for (const client of [io, nr, glide]) {
    const d = new Dlock(client, { watchdogLease: 1000 });
    assert.equal(d.library.cluster, true);
    const holds = [];
    for (const key of KEYS) holds.push(await d.lock(key).acquire());
    // Keys spread over the masters: each master has at least one lock.
    const counts = await Promise.all(nodes.map(async (n) => Number(await n.client().call("DBSIZE"))));
    assert.ok(counts.filter((c) => c > 0).length >= 2, `locks per master: ${counts}`);
    // A server-side wait on a dedicated connection to the key's master.
    const waiting = KEYS.map((key) => d.lock(key).acquire({ timeout: 20000 }));
    assert.ok(await waitUntil(async () => {
      const infos = await Promise.all(KEYS.map((k) => d.info(k)));
      return infos.every((i) => i.waiters.length === 1);
    }));
    await new Promise((resolve) => setTimeout(resolve, 600)); // longer than GLIDE's request timeout
    for (const h of holds) assert.equal(await h.release(), "released");
    const next = await Promise.all(waiting);
    assert.equal(await next[4].fenced("SET", "{acct}:balance", "1"), "OK");
    assert.equal(await next[4].check(), true);
    // Aborting a wait on a key's master leaves nothing there.
    const ac = new AbortController();
    const aborted = d.lock("gamma").acquire({ signal: ac.signal });
    assert.ok(await waitUntil(async () => (await d.info("gamma")).waiters.length === 1));
    ac.abort();
    await assert.rejects(aborted, { name: "AbortError" });
    assert.deepEqual((await d.info("gamma")).waiters, []);
    for (const h of next) assert.equal(await h.release(), "released");
    for (const key of KEYS) assert.equal(await d.info(key), null);
    // Prompt notice on a cluster: sharded subscriptions on each key's master (the default
    // lease: no renewal races the notice).
    const dn = new Dlock(client);
    for (const key of ["alpha", "{acct}:lock"]) {
      const h = await dn.lock(key).acquire();
      // acquire() waits at most 1 s for the subscription; on a loaded machine it can become
      // active later, and a release before that is learned from the check that follows the
      // subscription, with no reason ('not-held'). The reason is what is tested here.
      assert.ok(await waitUntil(async () => (await shardSubscribers(nodes, channelFor(key))) === 1), `${key}: subscribed`);
      const t0 = performance.now();
      await d.forceRelease(key);
      await new Promise((resolve) => (h.signal.aborted ? resolve() : h.signal.addEventListener("abort", resolve)));
      assert.equal(h.signal.reason.reason, "forced", `${d.library.name} ${key}`);
      assert.ok(performance.now() - t0 < 1000, `${d.library.name} ${key}: told after ${performance.now() - t0} ms`);
      assert.equal(await h.release(), "lost");
    }
    dn.close();
    d.close();
  }
  assert.equal(await movedErrors(nodes), 0, "no MOVED replies");
});
