// Shared by the package's tests: the one server harness of tests/node (helpers.js:
// real redis-server / valkey-server processes on free ports, stopped by PID), and a
// client of each flavour the package supports.
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import path from "node:path";
import Redis, { Cluster } from "ioredis";
import { createClient, createCluster } from "redis";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
export const harness = require(path.join(here, "..", "..", "..", "tests", "node", "helpers.js"));
export const { startServer, startCluster, sleep, waitUntil } = harness;

/** The client flavours: ioredis and node-redis, each with RESP2 and RESP3. */
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
];

export { Redis, Cluster, createClient, createCluster };
