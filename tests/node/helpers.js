"use strict";
// A real redis-server with the dlock module for each test: free loopback port,
// temp dir, `redis-server --port P --save '' --loadmodule MODULE`, stopped by PID
// when the test ends (also when it failed). MODULE is $DLOCK_MODULE or
// ../../target/release/libdlock.so relative to this file; $REDIS_SERVER
// overrides the binary.

const { spawn } = require("node:child_process");
const fs = require("node:fs");
const net = require("node:net");
const os = require("node:os");
const path = require("node:path");
const Redis = require("ioredis");

const START_TIMEOUT_MS = 20000;

function modulePath() {
  const p = path.resolve(
    process.env.DLOCK_MODULE ||
      path.join(__dirname, "..", "..", "target", "release", "libdlock.so"),
  );
  if (!fs.existsSync(p)) {
    throw new Error(
      `dlock module not found at ${p}: run \`cargo build --release\` (or \`make test\`) ` +
        "first, or set DLOCK_MODULE",
    );
  }
  return p;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitUntil(pred, timeoutMs = 10000, intervalMs = 10) {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    if (await pred()) return true;
    await sleep(intervalMs);
  }
  return pred();
}

class Server {
  /**
   * `extraArgs`: more redis-server arguments; `cluster`: start with cluster mode on;
   * `sentinelOf`: a Sentinel (no module) monitoring that Server as master `mymaster`.
   */
  constructor({ extraArgs = [], cluster = false, sentinelOf = null } = {}) {
    this.extraArgs = extraArgs;
    this.cluster = cluster;
    this.sentinelOf = sentinelOf;
    this.busPort = 0;
    this.dir = fs.mkdtempSync(path.join(os.tmpdir(), "dlock-node-"));
    this.clients = [];
    this.child = null;
    this.port = 0;
  }

  get logPath() {
    return path.join(this.dir, "redis.log");
  }

  logTail(n = 30) {
    try {
      return fs.readFileSync(this.logPath, "utf8").split("\n").slice(-n).join("\n");
    } catch {
      return "(no redis.log)";
    }
  }

  async start() {
    const bin = process.env.REDIS_SERVER || "redis-server";
    const module = this.sentinelOf ? null : modulePath();
    let last = "";
    for (let attempt = 0; attempt < 10; attempt++) {
      this.port = await freePort();
      if (this.sentinelOf) {
        // Sentinel rewrites its config file: one of its own in the temp dir.
        const conf = path.join(this.dir, "sentinel.conf");
        fs.writeFileSync(conf, [
          `port ${this.port}`, "bind 127.0.0.1", `dir ${this.dir}`, `logfile ${this.logPath}`,
          `sentinel monitor mymaster 127.0.0.1 ${this.sentinelOf.port} 1`,
          "sentinel down-after-milliseconds mymaster 5000", "",
        ].join("\n"));
        this.child = spawn(bin, [conf, "--sentinel"], { cwd: this.dir, stdio: "ignore" });
        this.exited = new Promise((resolve) => this.child.once("exit", resolve));
        this.child.once("error", () => {});
        if (await this.waitReady()) return this;
        last = this.logTail();
        await this.stop();
        if (!last.includes("Address already in use")) break;
        fs.rmSync(this.logPath, { force: true });
        continue;
      }
      const args = [
        "--port", String(this.port),
        "--bind", "127.0.0.1",
        "--dir", this.dir,
        "--save", "",
        "--appendonly", "no",
        "--daemonize", "no",
        "--logfile", this.logPath,
        "--loadmodule", module,
      ];
      if (this.cluster) {
        do this.busPort = await freePort(); while (this.busPort === this.port);
        args.push(
          "--cluster-enabled", "yes",
          "--cluster-config-file", path.join(this.dir, `nodes-${this.port}.conf`),
          "--cluster-port", String(this.busPort),
        );
      }
      args.push(...this.extraArgs);
      this.child = spawn(bin, args, { cwd: this.dir, stdio: "ignore" });
      this.exited = new Promise((resolve) => this.child.once("exit", resolve));
      this.child.once("error", () => {}); // reported through waitReady
      if (await this.waitReady()) return this;
      last = this.logTail();
      await this.stop();
      if (!last.includes("Address already in use")) break;
      fs.rmSync(this.logPath, { force: true });
    }
    throw new Error(`redis-server did not start (${bin}):\n${last}`);
  }

  async waitReady() {
    const deadline = Date.now() + START_TIMEOUT_MS;
    while (Date.now() < deadline) {
      if (this.child.exitCode !== null || this.child.signalCode !== null || !this.child.pid) {
        return false;
      }
      const c = new Redis({
        host: "127.0.0.1",
        port: this.port,
        lazyConnect: true,
        retryStrategy: () => null,
        maxRetriesPerRequest: 0,
        enableOfflineQueue: false,
      });
      c.on("error", () => {});
      try {
        await c.connect();
        // Our own process, not another one that grabbed the port.
        const info = await c.info("server");
        if (info.includes(`process_id:${this.child.pid}\r`)) return true;
      } catch {
        // not up yet
      } finally {
        c.disconnect();
      }
      await sleep(20);
    }
    return false;
  }

  /** A new ioredis client (RESP2: flat arrays). Closed when the server stops. */
  client() {
    const c = new Redis({ host: "127.0.0.1", port: this.port, maxRetriesPerRequest: 1 });
    this.clients.push(c);
    return c;
  }

  async stop() {
    for (const c of this.clients.splice(0)) c.disconnect();
    const child = this.child;
    this.child = null;
    if (child && child.exitCode === null && child.signalCode === null && child.pid) {
      child.kill("SIGTERM"); // our PID only
      const timer = setTimeout(() => child.kill("SIGKILL"), 10000);
      await this.exited;
      clearTimeout(timer);
    }
  }

  async cleanup() {
    await this.stop();
    if (!process.env.DLOCK_KEEP_TEST_DIRS) fs.rmSync(this.dir, { recursive: true, force: true });
  }
}

/** Starts a server for test context `t`; it is stopped when the test ends. */
async function startServer(t) {
  const server = new Server();
  t.after(() => server.cleanup());
  await server.start();
  return server;
}

/**
 * A cluster of `masters` servers (slots split evenly, no replicas) for test context `t`;
 * every node is stopped when the test ends. Resolves once every node sees
 * `cluster_state:ok` and all the others.
 */
async function startCluster(t, masters = 3) {
  const nodes = [];
  t.after(() => Promise.all(nodes.map((n) => n.cleanup())));
  for (let i = 0; i < masters; i++) {
    const n = new Server({ cluster: true });
    nodes.push(n);
    await n.start();
  }
  for (const [i, n] of nodes.entries()) {
    const c = n.client();
    try {
      await c.call("CLUSTER", "SET-CONFIG-EPOCH", i + 1);
    } catch {
      // already set
    }
    const first = Math.floor((i * 16384) / masters);
    const last = Math.floor(((i + 1) * 16384) / masters) - 1;
    await c.call("CLUSTER", "ADDSLOTSRANGE", first, last);
  }
  const c0 = nodes[0].client();
  for (const n of nodes.slice(1)) await c0.call("CLUSTER", "MEET", "127.0.0.1", n.port, n.busPort);
  const healthy = async (n) => {
    const c = n.client();
    try {
      const info = await c.call("CLUSTER", "INFO");
      if (!String(info).includes("cluster_state:ok")) return false;
      const text = String(await c.call("CLUSTER", "NODES"));
      const lines = text.split("\n").filter((l) => l.trim());
      return lines.length === nodes.length && !text.includes("handshake") && !text.includes("fail");
    } catch {
      return false;
    } finally {
      c.disconnect();
    }
  };
  const ok = await waitUntil(async () => (await Promise.all(nodes.map(healthy))).every(Boolean), 30000, 50);
  if (!ok) throw new Error("the cluster did not converge in 30 s");
  return nodes;
}

/** A Sentinel monitoring `master` (a started Server) as `mymaster`, for test context `t`. */
async function startSentinel(t, master) {
  const sentinel = new Server({ sentinelOf: master });
  t.after(() => sentinel.cleanup());
  await sentinel.start();
  const c = sentinel.client();
  const ok = await waitUntil(async () => {
    const addr = await c.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster").catch(() => null);
    return Array.isArray(addr) && Number(addr[1]) === master.port;
  });
  if (!ok) throw new Error("the sentinel does not know its master");
  return sentinel;
}

/** A RESP2 flat field/value array -> object. */
function flatToObject(flat) {
  const o = {};
  for (let i = 0; i < flat.length; i += 2) o[String(flat[i])] = flat[i + 1];
  return o;
}

/** DLOCK.INFO parsed: null, or {kind, token, holders: [...], waiters: [...]} */
async function lockInfo(c, key) {
  const raw = await c.call("DLOCK.INFO", key);
  if (raw === null) return null;
  const info = flatToObject(raw);
  info.holders = info.holders.map(flatToObject);
  info.waiters = info.waiters.map(flatToObject);
  return info;
}

async function blockedWaiters(c, key) {
  const info = await lockInfo(c, key);
  return info ? info.waiters.filter((w) => w.state === "blocked").length : 0;
}

/** A subscribed connection; next(timeoutMs) resolves to [channel, message] or null. */
async function subscribe(server, channel) {
  const sub = server.client();
  const queue = [];
  let waiter = null;
  sub.on("message", (ch, msg) => {
    queue.push([ch, msg]);
    if (waiter) waiter();
  });
  await sub.subscribe(channel);
  return {
    async next(timeoutMs = 10000) {
      if (queue.length) return queue.shift();
      await new Promise((resolve) => {
        const timer = setTimeout(resolve, timeoutMs);
        waiter = () => { clearTimeout(timer); resolve(); };
      });
      waiter = null;
      return queue.length ? queue.shift() : null;
    },
  };
}

module.exports = {
  Server, startServer, startCluster, startSentinel, modulePath, sleep, waitUntil, flatToObject, lockInfo,
  blockedWaiters, subscribe,
};
