// One interface over ioredis (Redis, Cluster; Sentinel through Redis) and node-redis
// (client, cluster), detected from the object passed in. Commands that do not block go on
// the user's own client (routed to the key's slot in a cluster: ioredis does not know
// module commands' keys); a server-side WAIT goes on a dedicated connection from a small
// pool, never on the user's shared, pipelined socket.
import { keySlot } from "./slot.js";

export type Arg = string | Buffer | number | bigint;

/** A connection of our own, for one blocked command at a time. */
export interface Dedicated {
  /** The server's CLIENT ID of this connection (for CLIENT UNBLOCK). */
  readonly clientId: number;
  call(args: Arg[]): Promise<unknown>;
  /** Closes the connection at once (a blocked command on it ends on the server). */
  destroy(): void;
}

export interface Adapter {
  readonly library: "ioredis" | "node-redis";
  readonly cluster: boolean;
  /** A non-blocking command about `key` (undefined: any node) on the user's client. */
  call(key: string | undefined, args: Arg[]): Promise<unknown>;
  /** The address of the server that serves `key` (its slot's master in a cluster). */
  nodeOf(key: string): Promise<string>;
  /** A new dedicated connection to the server that serves `key`. */
  connect(key: string): Promise<Dedicated>;
  /** The client's own per-command timeout in ms (undefined: none). */
  commandTimeout(): number | undefined;
  /** A stable name of the server or deployment (for ordering MultiLocks). */
  address(): string;
}

const str = (a: Arg): string | Buffer => (typeof a === "string" || Buffer.isBuffer(a) ? a : String(a));
const isRedirect = (e: unknown): boolean =>
  e instanceof Error && /^(MOVED|ASK|TRYAGAIN|CLUSTERDOWN) /.test(e.message);

// ---------------------------------------------------------------------------- ioredis

/* eslint-disable @typescript-eslint/no-explicit-any */
type Any = any;

async function ioredisDedicated(base: Any): Promise<Dedicated> {
  const c = base.duplicate({ lazyConnect: false, enableOfflineQueue: true, maxRetriesPerRequest: 0 });
  c.on("error", () => {});
  try {
    const id = Number(await c.call("CLIENT", "ID"));
    return {
      clientId: id,
      call: (args) => {
        const [cmd, ...rest] = args;
        return c.call(str(cmd as Arg), ...rest.map(str));
      },
      destroy: () => c.disconnect(),
    };
  } catch (e) {
    c.disconnect();
    throw e;
  }
}

class IoRedis implements Adapter {
  readonly library = "ioredis" as const;
  readonly cluster = false;
  constructor(private readonly r: Any) {}
  call(_key: string | undefined, args: Arg[]): Promise<unknown> {
    const [cmd, ...rest] = args;
    return this.r.call(str(cmd as Arg), ...rest.map(str));
  }
  async nodeOf(): Promise<string> {
    return "main";
  }
  connect(): Promise<Dedicated> {
    return ioredisDedicated(this.r);
  }
  commandTimeout(): number | undefined {
    return this.r.options?.commandTimeout || undefined;
  }
  address(): string {
    const o = this.r.options ?? {};
    if (o.sentinels) return `sentinel:${o.name}/${o.db ?? 0}`;
    if (o.path) return `unix:${o.path}/${o.db ?? 0}`;
    return `${o.host ?? "127.0.0.1"}:${o.port ?? 6379}/${o.db ?? 0}`;
  }
}

class IoRedisCluster implements Adapter {
  readonly library = "ioredis" as const;
  readonly cluster = true;
  constructor(private readonly c: Any) {}

  private waitReady: Promise<void> | undefined;

  private ready(): Promise<void> {
    if (this.c.status === "ready") return Promise.resolve();
    this.waitReady ??= new Promise<void>((resolve, reject) => {
      const ok = (): void => { this.c.off("error", bad); this.waitReady = undefined; resolve(); };
      const bad = (e: unknown): void => { this.c.off("ready", ok); this.waitReady = undefined; reject(e); };
      this.c.once("ready", ok);
      this.c.once("error", bad);
      if (this.c.status === "wait") this.c.connect().catch(() => {});
    });
    return this.waitReady;
  }

  /** The ioredis instance of the master serving `key`'s slot (undefined: not known yet). */
  private nodeFor(key: string): Any | undefined {
    const owners: string[] | undefined = this.c.slots?.[keySlot(key)];
    const master = owners?.[0];
    if (master === undefined) return undefined;
    for (const n of this.c.nodes("master")) {
      if (`${n.options.host}:${n.options.port}` === master) return n;
    }
    return undefined;
  }

  async call(key: string | undefined, args: Arg[]): Promise<unknown> {
    const [cmd, ...rest] = args.map(str);
    if (key === undefined) return this.c.call(cmd, ...rest);
    if (this.c.status !== "ready") await this.ready();
    const node = this.nodeFor(key);
    if (node === undefined) return this.c.call(cmd, ...rest);
    try {
      return await node.call(cmd, ...rest);
    } catch (e) {
      if (!isRedirect(e)) throw e;
      // The slot moved: let ioredis follow (and refresh its slot map).
      this.c.refreshSlotsCache?.();
      return this.c.call(cmd, ...rest);
    }
  }

  private async node(key: string): Promise<Any> {
    if (this.c.status !== "ready") await this.ready();
    const node = this.nodeFor(key);
    if (node === undefined) throw new Error(`no master known for the slot of ${JSON.stringify(key)}`);
    return node;
  }

  async nodeOf(key: string): Promise<string> {
    const n = await this.node(key);
    return `${n.options.host}:${n.options.port}`;
  }

  async connect(key: string): Promise<Dedicated> {
    return ioredisDedicated(await this.node(key));
  }

  commandTimeout(): number | undefined {
    return this.c.options?.redisOptions?.commandTimeout || undefined;
  }

  address(): string {
    const nodes = (this.c.startupNodes ?? []).map((n: Any) =>
      typeof n === "string" ? n : `${n.host ?? "127.0.0.1"}:${n.port ?? 6379}`,
    );
    return `cluster:${nodes.sort()[0] ?? ""}`;
  }
}

// ------------------------------------------------------------------------- node-redis

function nodeRedisTimeout(c: Any): number | undefined {
  const t = c?._commandOptions?.timeout ?? c?.options?.commandOptions?.timeout ?? c?._self?._commandOptions?.timeout;
  return typeof t === "number" && t > 0 ? t : undefined;
}

async function nodeRedisDedicated(base: Any): Promise<Dedicated> {
  const c = base.duplicate();
  c.on("error", () => {});
  await c.connect();
  try {
    const id = Number(await c.sendCommand(["CLIENT", "ID"]));
    return {
      clientId: id,
      call: (args) => c.sendCommand(args.map(str)),
      destroy: () => c.destroy(),
    };
  } catch (e) {
    c.destroy();
    throw e;
  }
}

class NodeRedis implements Adapter {
  readonly library = "node-redis" as const;
  readonly cluster = false;
  constructor(private readonly r: Any) {}
  call(_key: string | undefined, args: Arg[]): Promise<unknown> {
    return this.r.sendCommand(args.map(str));
  }
  async nodeOf(): Promise<string> {
    return "main";
  }
  connect(): Promise<Dedicated> {
    return nodeRedisDedicated(this.r);
  }
  commandTimeout(): number | undefined {
    return nodeRedisTimeout(this.r);
  }
  address(): string {
    const o = this.r.options ?? {};
    if (o.url) return String(o.url);
    const s = o.socket ?? {};
    if (s.path) return `unix:${s.path}/${o.database ?? 0}`;
    return `${s.host ?? "localhost"}:${s.port ?? 6379}/${o.database ?? 0}`;
  }
}

class NodeRedisCluster implements Adapter {
  readonly library = "node-redis" as const;
  readonly cluster = true;
  constructor(private readonly c: Any) {}
  call(key: string | undefined, args: Arg[]): Promise<unknown> {
    return this.c.sendCommand(key, false, args.map(str));
  }
  async nodeOf(key: string): Promise<string> {
    const master = this.c.getSlotMaster(keySlot(key));
    return `${master.host}:${master.port}`;
  }
  async connect(key: string): Promise<Dedicated> {
    const client = await this.c.nodeClient(this.c.getSlotMaster(keySlot(key)));
    return nodeRedisDedicated(client);
  }
  commandTimeout(): number | undefined {
    const d = this.c._options?.defaults ?? this.c.options?.defaults;
    return nodeRedisTimeout({ options: d }) ?? 5000;
  }
  address(): string {
    const nodes = (this.c._options?.rootNodes ?? []).map((n: Any) =>
      n.url ?? `${n.socket?.host ?? "localhost"}:${n.socket?.port ?? 6379}`,
    );
    return `cluster:${nodes.sort()[0] ?? ""}`;
  }
}

class NodeRedisSentinel implements Adapter {
  readonly library = "node-redis" as const;
  readonly cluster = false;
  constructor(private readonly s: Any) {}
  call(_key: string | undefined, args: Arg[]): Promise<unknown> {
    return this.s.sendCommand(false, args.map(str));
  }
  async nodeOf(): Promise<string> {
    return "main";
  }
  async connect(): Promise<Dedicated> {
    // A sentinel client of its own (one master connection): it follows failovers too.
    const c = this.s.duplicate({ masterPoolSize: 1 });
    c.on("error", () => {});
    await c.connect();
    try {
      const id = Number(await c.sendCommand(false, ["CLIENT", "ID"]));
      return {
        clientId: id,
        call: (args) => c.sendCommand(false, args.map(str)),
        destroy: () => c.destroy(),
      };
    } catch (e) {
      c.destroy();
      throw e;
    }
  }
  commandTimeout(): number | undefined {
    return nodeRedisTimeout(this.s) ?? nodeRedisTimeout({ options: this.s._options?.nodeClientOptions });
  }
  address(): string {
    return `sentinel:${this.s._options?.name ?? this.s.options?.name ?? ""}`;
  }
}

/** The adapter for a client of ioredis or node-redis (throws for anything else). */
export function adapt(client: unknown): Adapter {
  const c = client as Any;
  if (c && typeof c === "object") {
    if (c.isCluster === true && typeof c.nodes === "function") return new IoRedisCluster(c);
    if (typeof c.call === "function" && typeof c.duplicate === "function" && c.options) return new IoRedis(c);
    if (typeof c.getSlotMaster === "function" && typeof c.sendCommand === "function") return new NodeRedisCluster(c);
    if (typeof c.getMasterNode === "function" && typeof c.sendCommand === "function") return new NodeRedisSentinel(c);
    if (typeof c.sendCommand === "function" && typeof c.duplicate === "function") return new NodeRedis(c);
  }
  throw new TypeError("dlock-redis needs an ioredis Redis/Cluster or a node-redis client/cluster/sentinel");
}
