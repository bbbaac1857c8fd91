// 32 concurrent tasks on one lock, each holding it 1 ms, for a few seconds per contender:
// node-redlock (its retry loop), redis-semaphore's Mutex (its polling) and dlock-redis
// (server-side FIFO queue). Prints grants/s, the p99 wait for the lock, commands the
// server ran per grant (INFO commandstats) and Jain's fairness index over the tasks'
// grant counts.
//
//   node demo/contention.mjs [--seconds 5] [--tasks 32] [--spawn] [--port 6379]
//
// --spawn starts a private redis-server with the module (REDIS_SERVER, DLOCK_MODULE as in
// the tests); otherwise it connects to 127.0.0.1:PORT (`make run`).
import { parseArgs } from "node:util";
import { setTimeout as sleep } from "node:timers/promises";
import { createRequire } from "node:module";
import { Redis } from "ioredis";
import Redlock from "redlock";
import { Mutex } from "redis-semaphore";
import { Dlock } from "dlock-redis";

const { values: opt } = parseArgs({
  options: {
    seconds: { type: "string", default: "5" },
    tasks: { type: "string", default: "32" },
    port: { type: "string", default: "6379" },
    spawn: { type: "boolean", default: false },
  },
});
const SECONDS = Number(opt.seconds);
const TASKS = Number(opt.tasks);
const HOLD_MS = 1;

let server;
let port = Number(opt.port);
if (opt.spawn) {
  const { Server } = createRequire(import.meta.url)("../../../tests/node/helpers.js");
  server = new Server();
  await server.start();
  port = server.port;
}

async function commandCalls(r) {
  const info = await r.info("commandstats");
  let total = 0;
  for (const m of info.matchAll(/^cmdstat_([^:]+):calls=(\d+)/gm)) {
    if (m[1] !== "info") total += Number(m[2]);
  }
  return total;
}

function p99(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor(s.length * 0.99))] : NaN;
}

function jain(counts) {
  const sum = counts.reduce((a, b) => a + b, 0);
  const sq = counts.reduce((a, b) => a + b * b, 0);
  return sq === 0 ? 0 : (sum * sum) / (counts.length * sq);
}

/** Runs `TASKS` tasks for `SECONDS`; `take()` resolves to a release function. */
async function contend(name, makeTake) {
  const admin = new Redis({ port });
  const clients = [];
  await admin.call("CONFIG", "RESETSTAT");
  await admin.del("demo-lock");
  const waits = [];
  const counts = new Array(TASKS).fill(0);
  let errors = 0;
  const end = performance.now() + SECONDS * 1000;
  const before = await commandCalls(admin);
  const t0 = performance.now();
  await Promise.all(counts.map(async (_, i) => {
    const take = await makeTake(clients);
    while (performance.now() < end) {
      const w0 = performance.now();
      let release;
      try {
        release = await take();
      } catch {
        errors++;
        continue;
      }
      waits.push(performance.now() - w0);
      counts[i]++;
      await sleep(HOLD_MS);
      await release();
    }
  }));
  const elapsed = (performance.now() - t0) / 1000;
  const calls = (await commandCalls(admin)) - before;
  const grants = counts.reduce((a, b) => a + b, 0);
  for (const c of clients) c.disconnect?.() ?? c.close?.();
  admin.disconnect();
  return {
    name,
    "grants/s": Math.round(grants / elapsed),
    "p99 wait": `${p99(waits).toFixed(1)}ms`,
    "cmds/grant": (calls / Math.max(grants, 1)).toFixed(2),
    Jain: jain(counts).toFixed(3),
    "per-task min..max": `${Math.min(...counts)}..${Math.max(...counts)}`,
    errors,
  };
}

const rows = [];
try {
  // node-redlock 4: its default retry loop (200 ms ± 200 ms jitter), retrying without limit.
  const redlockClient = new Redis({ port });
  const redlock = new Redlock([redlockClient], { retryCount: -1 });
  rows.push(await contend("node-redlock", async () => async () => {
    const lock = await redlock.lock("demo-lock", 10000);
    return () => lock.unlock();
  }));
  redlockClient.disconnect();

  // redis-semaphore: Mutex with its defaults (polls every 10 ms), one client per task.
  rows.push(await contend("redis-semaphore Mutex", async (clients) => {
    const c = new Redis({ port });
    clients.push(c);
    return async () => {
      const m = new Mutex(c, "demo-lock", { acquireTimeout: 120000 });
      await m.acquire();
      return () => m.release();
    };
  }));

  // dlock-redis: one shared client; waits queue on the server (FIFO) on pooled connections.
  const shared = new Redis({ port });
  const dlock = new Dlock(shared, { maxWaitConnections: TASKS });
  rows.push(await contend("dlock-redis", async () => async () => {
    const hold = await dlock.lock("demo-lock").acquire();
    return () => hold.release();
  }));
  dlock.close();
  shared.disconnect();
} finally {
  await server?.cleanup();
}

const cols = Object.keys(rows[0]);
const width = cols.map((c) => Math.max(c.length, ...rows.map((r) => String(r[c]).length)));
console.log(`${TASKS} tasks, one lock, ${HOLD_MS} ms hold, ${SECONDS} s per contender`);
console.log(cols.map((c, i) => (i === 0 ? c.padEnd(width[i]) : c.padStart(width[i]))).join("  "));
for (const r of rows) {
  console.log(cols.map((c, i) => (i === 0 ? String(r[c]).padEnd(width[i]) : String(r[c]).padStart(width[i]))).join("  "));
}
