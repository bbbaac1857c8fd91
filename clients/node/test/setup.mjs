// Shared by the package's tests: the one server harness of tests/node (helpers.js:
// real redis-server / valkey-server processes on free ports, stopped by PID), and a
// client of each flavour the package supports.
import { execFileSync, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import net from "node:net";
import { fileURLToPath } from "node:url";
import path from "node:path";
import Redis, { Cluster } from "ioredis";
import { createClient, createCluster } from "redis";
import { GlideClient, GlideClusterClient, Logger, ProtocolVersion } from "@valkey/valkey-glide";

// GLIDE logs every error reply at WARN on stdout; the tests expect many.
Logger.setLoggerConfig("off");

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
export const harness = require(path.join(here, "..", "..", "..", "tests", "node", "helpers.js"));
export const { startServer, startCluster, sleep, waitUntil } = harness;

/**
 * The client flavours: ioredis and node-redis, each with RESP2 and RESP3, then Valkey
 * GLIDE with RESP3 and RESP2 (its default request timeout, 250 ms, left as it is).
 */
export const FLAVOURS = [
  ...[2, 3].map((protocol) => ({
    name: `ioredis RESP${protocol}`,
    async make(t, port, opts = {}) {
      const extra = protocol === 3 ? { replyMapping: "resp3" } : {};
      const r = new Redis({ host: "127.0.0.1", port, protocol, ...extra, ...opts });
      r.on("error", () => {});
      t.after(() => r.disconnect());
      return r;
    },
  })),
  ...[2, 3].map((RESP) => ({
    name: `node-redis RESP${RESP}`,
    async make(t, port, opts = {}) {
      const r = createClient({ socket: { host: "127.0.0.1", port }, RESP, ...opts });
      r.on("error", () => {});
      await r.connect();
      t.after(() => r.destroy());
      return r;
    },
  })),
  ...["RESP3", "RESP2"].map((protocol) => ({
    name: `valkey-glide ${protocol}`,
    async make(t, port, opts = {}) {
      const r = await GlideClient.createClient({
        addresses: [{ host: "127.0.0.1", port }],
        protocol: ProtocolVersion[protocol],
        ...opts,
      });
      t.after(() => r.close());
      return r;
    },
  })),
];

/** The flavours most behaviour tests run on: one of each library. */
export const [IOREDIS2, IOREDIS, NODE_REDIS2, NODE_REDIS3, GLIDE, GLIDE2] = FLAVOURS;

export { Redis, Cluster, createClient, createCluster, GlideClient, GlideClusterClient };

/**
 * A Toxiproxy server on a free loopback port for network faults (stopped by PID when the
 * test ends): $TOXIPROXY_SERVER, else `toxiproxy-server` on PATH, else `server` in
 * `$(go env GOPATH)/bin` (`go install github.com/Shopify/toxiproxy/v2/cmd/server@latest`).
 * Null when there is none (the test skips).
 */
export async function toxiproxy(t) {
  const bin = findToxiproxy();
  if (bin === null) return null;
  const port = await freePort();
  const child = spawn(bin, ["-host", "127.0.0.1", "-port", String(port)], { stdio: "ignore" });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.once("error", () => {});
  t.after(async () => {
    if (child.exitCode === null && child.signalCode === null) process.kill(child.pid, "SIGTERM");
    await exited;
  });
  const api = async (method, route, body) => {
    const res = await fetch(`http://127.0.0.1:${port}${route}`, {
      method,
      headers: body === undefined ? {} : { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    if (!res.ok) throw new Error(`toxiproxy ${method} ${route}: ${res.status} ${await res.text()}`);
    const text = await res.text();
    return text === "" ? null : JSON.parse(text);
  };
  const up = () => fetch(`http://127.0.0.1:${port}/version`).then((res) => res.ok, () => false);
  if (!(await waitUntil(up, 10000))) {
    throw new Error(`toxiproxy (${bin}) did not start on port ${port}`);
  }
  let n = 0;
  return {
    /** A proxy to 127.0.0.1:`upstream`: its port, and the faults. */
    async proxy(upstream) {
      const name = `p${++n}`;
      const p = await api("POST", "/proxies", { name, listen: "127.0.0.1:0", upstream: `127.0.0.1:${upstream}`, enabled: true });
      const toxics = [];
      return {
        port: Number(p.listen.split(":").pop()),
        /** A silent partition: nothing passes either way, nothing closes. */
        async partition() {
          for (const stream of ["upstream", "downstream"]) {
            const toxic = `cut-${stream}`;
            await api("POST", `/proxies/${name}/toxics`, { name: toxic, type: "timeout", stream, attributes: { timeout: 0 } });
            toxics.push(toxic);
          }
        },
        async heal() {
          for (const toxic of toxics.splice(0)) await api("DELETE", `/proxies/${name}/toxics/${toxic}`);
        },
        /** Connections refused (the open ones are closed). */
        async refuse() {
          await api("POST", `/proxies/${name}`, { enabled: false });
        },
      };
    },
  };
}

/** A free loopback port. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

function findToxiproxy() {
  const candidates = [process.env.TOXIPROXY_SERVER];
  for (const dir of (process.env.PATH ?? "").split(path.delimiter)) candidates.push(path.join(dir, "toxiproxy-server"));
  try {
    const gopath = execFileSync("go", ["env", "GOPATH"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] }).trim();
    if (gopath) candidates.push(path.join(gopath.split(path.delimiter)[0], "bin", "server"));
  } catch {
    // no go
  }
  for (const c of candidates) {
    if (c && existsSync(c)) return c;
  }
  return null;
}
