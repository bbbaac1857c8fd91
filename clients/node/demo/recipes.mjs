// The recipes, runnable: three "replicas" (each its own connection and Dlock, as separate
// processes would be) schedule one job every second with runOnce — it runs once per tick,
// the others skip — and campaign in one Election: the leader proclaims its address, an
// observer prints every change, and each leader resigns after two seconds so the next in
// line (FIFO) takes over.
//
//   node demo/recipes.mjs [--seconds 6] [--spawn] [--port 6379]
//
// --spawn starts a private redis-server with the module (REDIS_SERVER, DLOCK_MODULE as in
// the tests); otherwise it connects to 127.0.0.1:PORT (`make run`).
import { parseArgs } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { createRequire } from "node:module";
import { Redis } from "ioredis";
import { Dlock, Election, runOnce } from "dlock-redis";

const { values: opt } = parseArgs({
  options: {
    seconds: { type: "string", default: "6" },
    port: { type: "string", default: "6379" },
    spawn: { type: "boolean", default: false },
  },
});
let server;
let port = Number(opt.port);
if (opt.spawn) {
  const { Server } = createRequire(import.meta.url)("../../../tests/node/helpers.js");
  server = new Server();
  await server.start();
  port = server.port;
}
const until = Date.now() + Number(opt.seconds) * 1000;
const t0 = Date.now();
const at = () => `${String(Date.now() - t0).padStart(5)} ms`;

const replicas = ["a", "b", "c"].map((id) => {
  const redis = new Redis({ port });
  return { id, redis, locks: new Dlock(redis) };
});

// An observer: every change of leader, from the lock's notifications (no polling).
const watcher = new Election(replicas[0].locks, "demo:leader");
const observer = watcher.observe();
const watching = (async () => {
  for await (const leader of observer) {
    console.log(`${at()}  observer: ${leader ? `${leader.owner} leads (term ${leader.token}) at ${leader.value ?? "?"}` : "nobody leads"}`);
  }
})();

async function replica({ id, locks }) {
  // The scheduled job: once per tick across the replicas; skipped by the others.
  const schedule = (async () => {
    for (let tick = Math.ceil(Date.now() / 1000); tick * 1000 < until; tick++) {
      await sleep(tick * 1000 - Date.now());
      const r = await runOnce(locks, "demo:nightly", { atMostFor: 10000, atLeastFor: 500 }, async (signal, hold) => {
        await sleep(50, undefined, { signal }); // the job; `signal` aborts if the hold is lost
        return `report ${tick} (token ${hold.token})`;
      });
      if (r.outcome !== "skipped") console.log(`${at()}  ${id}: ${r.outcome} ${r.value}`);
    }
  })();
  // The election: campaign, proclaim, lead for 2 s (or until lost), resign, campaign again.
  const election = new Election(locks, "demo:leader", { owner: `replica-${id}`, bind: true });
  while (Date.now() < until) {
    const term = await election.campaign({ timeout: Math.max(0, until - Date.now()) }).catch(() => null);
    if (term === null) break;
    await term.proclaim(`10.0.0.${id.charCodeAt(0) - 96}:8080`);
    await sleep(2000, undefined, { signal: term.signal }).catch(() => console.log(`${at()}  ${id}: lost the lead`));
    await term.resign();
  }
  await schedule;
  election.close();
}

await Promise.all(replicas.map(replica));
observer.close();
await watching;
watcher.close();
for (const r of replicas) {
  r.locks.close();
  r.redis.disconnect();
}
await server?.cleanup();
