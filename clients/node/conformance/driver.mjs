// The conformance driver of the Node client (conformance/README.md): JSON Lines on
// stdin/stdout, driving only dlock-redis' public API on one transport, named by the first
// argument: `ioredis`, `node-redis` or `valkey-glide`. Every request runs as its own task
// (a blocking acquire never holds up the others); events are written the moment the
// client's loss signal (`hold.signal`, an AbortSignal) fires.
//
// `exit`: the driver answers, stops reading, and closes the transport client it opened —
// what the README's quick start does with its own client (`redis.disconnect()`), since an
// open ioredis/node-redis/GLIDE client keeps any Node process alive — but never calls
// `Dlock.close()`: whether the process then ends is up to dlock-redis' own connections and
// timers.
import { createInterface } from "node:readline";
import { Dlock, Election, MultiLock } from "dlock-redis";
import * as dlock from "dlock-redis";

const flavour = process.argv[2];
const FLAVOURS = ["ioredis", "node-redis", "valkey-glide"];
if (!FLAVOURS.includes(flavour)) {
  process.stderr.write(`usage: driver.mjs ${FLAVOURS.join("|")}\n`);
  process.exit(2);
}

function send(obj) {
  process.stdout.write(`${JSON.stringify(obj)}\n`);
}

class Unsupported extends Error {}

/** The contract's spelling of this client's names. */
const REASONS = {
  forced: "forced",
  expired: "expired",
  deleted: "deleted",
  disconnected: "disconnected",
  unreachable: "unreachable",
  "not-held": "not_held",
  "no-quorum": "no_quorum",
};
const RESULTS = { released: "released", "still-held": "still_held", lost: "lost", unknown: "unknown" };

const text = (v) => (Buffer.isBuffer(v) ? v.toString("utf8") : String(v));

/** An error as the protocol's ERROR object: the contract's kind, by this client's classes. */
function errorOf(e) {
  const message = e instanceof Error ? e.message : String(e);
  if (e instanceof Unsupported) return { kind: "unsupported", message };
  if (e instanceof dlock.LockLost) return { kind: "lost", reason: REASONS[e.reason] ?? e.reason, message };
  if (e instanceof dlock.NotHeld) return { kind: "lost", reason: "not_held", message };
  if (e instanceof dlock.AcquireTimeout) return { kind: "timeout", message };
  if (e instanceof dlock.WrongKind) return { kind: "wrong_kind", message };
  if (e instanceof dlock.ModuleNotLoaded) return { kind: "module_not_loaded", message };
  if (e instanceof dlock.Deadlock) {
    return { kind: "deadlock", message, cycle: e.cycle.map((s) => [text(s.key), text(s.owner)]) };
  }
  if (e instanceof dlock.QueueFull) return { kind: "queue_full", message };
  if (e instanceof dlock.NotDurable) return { kind: "not_durable", message };
  if (e instanceof dlock.ConnectionError) return { kind: "connection", message };
  if (e instanceof dlock.InvalidArgument) {
    return e.argument === undefined ? { kind: "invalid_argument", message } : { kind: "invalid_argument", argument: e.argument, message };
  }
  return { kind: "other", message: `${e?.constructor?.name ?? typeof e}: ${message}` };
}

// ------------------------------------------------------------------------ transports

/** The transport client for `url`, with its defaults except `timeout` (its reply timeout, ms). */
async function connect(url, timeout) {
  if (flavour === "ioredis") {
    const { Redis } = await import("ioredis");
    const r = new Redis(url, timeout === undefined ? {} : { commandTimeout: timeout });
    r.on("error", () => {});
    return { client: r, close: () => r.disconnect() };
  }
  if (flavour === "node-redis") {
    const { createClient } = await import("redis");
    const r = createClient(timeout === undefined ? { url } : { url, commandOptions: { timeout } });
    r.on("error", () => {});
    await r.connect();
    return { client: r, close: () => r.destroy() };
  }
  const { GlideClient, Logger } = await import("@valkey/valkey-glide");
  Logger.setLoggerConfig("off");
  const u = new URL(url);
  const r = await GlideClient.createClient({
    addresses: [{ host: u.hostname, port: Number(u.port || 6379) }],
    ...(timeout === undefined ? {} : { requestTimeout: timeout }),
  });
  return { client: r, close: () => r.close() };
}

// -------------------------------------------------------------------------- the state

let transport; // { client, close }
let client; // Dlock
let defaults = {}; // acquire options every acquire gets (replicas, bind)
const handles = new Map(); // handle -> { release(), held(), signal }
const elections = [];

function watch(handle, signal) {
  const fire = () => send({ event: "lost", handle, reason: REASONS[signal.reason?.reason] ?? "not_held" });
  if (signal.aborted) fire();
  else signal.addEventListener("abort", fire, { once: true });
}

function lockOf(req) {
  const key = req.key;
  switch (req.kind ?? "mutex") {
    case "mutex":
      return client.lock(key);
    case "fair":
      return client.fairLock(key);
    case "read":
      return client.rwLock(key).read();
    case "write":
      return client.rwLock(key).write();
    case "semaphore":
      return client.semaphore(key, req.limit ?? 1);
    default:
      throw new Unsupported(`kind ${JSON.stringify(req.kind)}`);
  }
}

function acquireOptions(req) {
  const o = { ...defaults, timeout: req.wait_ms ?? 0 };
  if (req.lease_ms !== undefined) o.lease = req.lease_ms;
  if (req.bind !== undefined) o.bind = req.bind;
  if (req.permits !== undefined) o.permits = req.permits;
  if (req.owner !== undefined) o.owner = req.owner;
  return o;
}

const OPS = {
  async open(req) {
    const o = req.options ?? {};
    if (o.wait_mode !== undefined && o.wait_mode !== "server") {
      throw new Unsupported(`wait_mode ${o.wait_mode}: dlock-redis waits on the server only`);
    }
    const options = {};
    if (o.watchdog_lease_ms !== undefined) options.watchdogLease = o.watchdog_lease_ms;
    if (o.renew_interval_ms !== undefined) options.renewInterval = o.renew_interval_ms;
    defaults = {};
    if (o.replicas !== undefined) defaults.replicas = o.replicas;
    if (o.bind !== undefined) defaults.bind = o.bind;
    const t = await connect(req.url, o.transport_timeout_ms);
    try {
      client = new Dlock(t.client, options);
    } catch (e) {
      t.close();
      throw e;
    }
    transport = t;
    return {};
  },

  async acquire(req) {
    const hold = await lockOf(req).acquire(acquireOptions(req));
    handles.set(req.handle, {
      release: async () => {
        const r = await hold.release();
        return r === "unknown" ? { result: "unknown", error: String(hold.releaseError) } : { result: RESULTS[r] };
      },
      held: () => hold.isAcquired,
    });
    watch(req.handle, hold.signal);
    return { token: String(hold.token) };
  },

  async acquire_multi(req) {
    const o = { timeout: req.wait_ms ?? 0 };
    if (req.lease_ms !== undefined) o.lease = req.lease_ms;
    const bind = req.bind ?? defaults.bind;
    if (bind !== undefined) o.bind = bind;
    const multi = await new MultiLock(req.keys.map((k) => client.lock(k))).acquire(o);
    handles.set(req.handle, {
      release: async () => {
        const rs = await multi.release();
        const i = rs.indexOf("unknown");
        if (i >= 0) return { result: "unknown", error: String(multi.holds[i].releaseError) };
        return { result: rs.includes("lost") ? "lost" : rs.every((r) => r === "still-held") ? "still_held" : "released" };
      },
      held: () => multi.isAcquired,
    });
    watch(req.handle, multi.signal);
    return { tokens: multi.tokens.map(String) };
  },

  async campaign(req) {
    const election = new Election(client, req.name);
    elections.push(election);
    const term = await election.campaign({ timeout: req.wait_ms ?? 0 });
    if (req.value !== undefined) await term.proclaim(req.value);
    handles.set(req.handle, {
      release: async () => ({ result: RESULTS[await term.resign()] }),
      held: () => !term.lost && !term.resigned,
    });
    watch(req.handle, term.signal);
    return { key: req.name };
  },

  async unlock(req) {
    const h = handles.get(req.handle);
    if (h === undefined) throw new Error(`no hold ${JSON.stringify(req.handle)}`);
    return h.release();
  },

  async held(req) {
    const h = handles.get(req.handle);
    return { held: h === undefined ? false : h.held() };
  },

  async close() {
    for (const e of elections) e.close();
    client?.close();
    return {};
  },

  async exit() {
    return {};
  },
};

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  if (line.trim() === "") return;
  let req;
  try {
    req = JSON.parse(line);
  } catch (e) {
    process.stderr.write(`driver: not JSON: ${line}\n`);
    return;
  }
  const op = OPS[req.op];
  const run = op === undefined ? Promise.reject(new Unsupported(`op ${req.op}`)) : Promise.resolve().then(() => op(req));
  run.then(
    (fields) => {
      send({ id: req.id, ok: true, ...fields });
      if (req.op === "exit") {
        lines.close();
        process.stdin.destroy();
        transport?.close();
      }
    },
    (e) => {
      if (!(e instanceof Unsupported) && process.env.DLOCK_DRIVER_DEBUG) process.stderr.write(`${req.op}: ${e?.stack ?? e}\n`);
      send({ id: req.id, ok: false, error: errorOf(e) });
    },
  );
});
