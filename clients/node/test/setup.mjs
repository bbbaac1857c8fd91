// Shared by the package's tests: the one server harness of tests/node (helpers.js:
// real redis-server / valkey-server processes on free ports, stopped by PID), and a
// client of each flavour the package supports.
import { createRequire } from "node:module";
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
