// One interface over ioredis (Redis, Cluster; Sentinel through Redis), node-redis
// (client, cluster, sentinel) and Valkey GLIDE (GlideClient, GlideClusterClient),
// detected from the object passed in. Commands that do not block go on
// the user's own client (routed to the key's slot in a cluster: ioredis does not know
// module commands' keys); a server-side WAIT goes on a dedicated connection from a small
// pool, never on the user's shared, pipelined socket.
import { keySlot } from "./slot.js";

export type Arg = string | Buffer | number | bigint;

/** The client libraries this package works with. */
export type Library = "ioredis" | "node-redis" | "valkey-glide";

/** A connection of our own, for one blocked command at a time. */
export interface Dedicated {
  /** The server's CLIENT ID of this connection (for CLIENT UNBLOCK). */
  readonly clientId: number;
  call(args: Arg[]): Promise<unknown>;
  /** Closes the connection at once (a blocked command on it ends on the server). */
  destroy(): void;
}

export interface Adapter {
  readonly library: Library;
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

// ----------------------------------------------------------------------- Valkey GLIDE

/**
 * How long a GLIDE connection of our own waits for a reply (its `requestTimeout`, ms).
 * GLIDE's default (250 ms) would cut a server-side wait: waits are sliced below this.
 */
export const GLIDE_WAIT_TIMEOUT = 10000;

/** GLIDE's names of the error kinds it takes off a reply, back to the reply's first word. */
const GLIDE_KINDS: Record<string, string> = {
  ResponseError: "ERR",
  TypeError: "WRONGTYPE",
  ExecAbortError: "EXECABORT",
  BusyLoadingError: "LOADING",
  NoScriptError: "NOSCRIPT",
  CrossSlot: "CROSSSLOT",
  ReadOnly: "READONLY",
  MasterDown: "MASTERDOWN",
  ClusterDown: "CLUSTERDOWN",
  TryAgain: "TRYAGAIN",
  NotBusy: "NOTBUSY",
  Moved: "MOVED",
  Ask: "ASK",
  NoAuth: "NOAUTH",
  NoPerm: "NOPERM",
};

/** An error reply of the server, as GLIDE reports it, with the reply's own text. */
class GlideReplyError extends Error {
  constructor(message: string, cause: unknown) {
    super(message, { cause });
    this.name = "ReplyError";
  }
}

/**
 * GLIDE's error for an error reply (a `RequestError` whose text is the reply's) made the
 * reply's own text again: `NOTHELD: the owner…` → `NOTHELD the owner…`, `An error was
 * signalled by the server: - ResponseError: unknown command…` → `ERR unknown command…`.
 * Timeouts, connection and closing errors stay GLIDE's.
 */
function glideError(e: unknown): unknown {
  if (!(e instanceof Error)) return e;
  const kind = e.constructor?.name ?? e.name;
  if (kind !== "RequestError") return e;
  const msg = e.message;
  const signalled = /^An error was signalled by the server: - (\w+): ?([\s\S]*)$/.exec(msg);
  if (signalled !== null) {
    const word = GLIDE_KINDS[signalled[1] ?? ""] ?? signalled[1] ?? "ERR";
    return new GlideReplyError(`${word} ${signalled[2] ?? ""}`, e);
  }
  const coded = /^([A-Z][A-Z0-9_-]*): ([\s\S]*)$/.exec(msg);
  if (coded !== null) return new GlideReplyError(`${coded[1]} ${coded[2]}`, e);
  return e;
}

/** GLIDE's RESP3 maps (`[{ key, value }, …]`) as Maps, recursively; everything else as is. */
function glideReply(v: unknown): unknown {
  if (!Array.isArray(v)) return v;
  if (v.length > 0 && v.every((e) => e !== null && typeof e === "object" && !Array.isArray(e) && !Buffer.isBuffer(e) && "key" in e && "value" in e)) {
    return new Map(v.map((e: { key: unknown; value: unknown }) => [e.key, glideReply(e.value)]));
  }
  return v.map(glideReply);
}

const glideArgs = (args: Arg[]): Array<string | Buffer> => args.map(str);

/** The settings of the user's GLIDE client that a connection of our own keeps. @internal */
export function glideSettings(c: Any): Record<string, unknown> {
  const cfg: Record<string, unknown> = c?.config ?? {};
  const keep: Record<string, unknown> = {};
  for (const k of ["credentials", "useTLS", "protocol", "clientName", "advancedConfiguration", "connectionBackoff", "databaseId"]) {
    if (cfg[k] !== undefined) keep[k] = cfg[k];
  }
  return keep;
}

let glideModule: Promise<Any> | undefined;
/** The user's `@valkey/valkey-glide` (a peer dependency: loaded only for GLIDE clients). @internal */
export function loadGlide(): Promise<Any> {
  const name = "@valkey/valkey-glide";
  glideModule ??= import(name).then((m: Any) => (m.GlideClient ? m : m.default));
  return glideModule;
}

/** A standalone GLIDE client of our own to one server, for one blocked command at a time. */
async function glideDedicated(address: { host: string; port: number }, settings: Record<string, unknown>): Promise<Dedicated> {
  const glide = await loadGlide();
  const c = await glide.GlideClient.createClient({
    ...settings,
    addresses: [address],
    requestTimeout: GLIDE_WAIT_TIMEOUT,
  });
  const send = async (args: Arg[]): Promise<unknown> => {
    try {
      return glideReply(await c.customCommand(glideArgs(args)));
    } catch (e) {
      throw glideError(e);
    }
  };
  try {
    const id = Number(await send(["CLIENT", "ID"]));
    return { clientId: id, call: send, destroy: () => c.close() };
  } catch (e) {
    c.close();
    throw e;
  }
}

function glideAddress(c: Any): { host: string; port: number } {
  const a = c?.config?.addresses?.[0] ?? {};
  return { host: a.host ?? "localhost", port: a.port ?? 6379 };
}

class Glide implements Adapter {
  readonly library = "valkey-glide" as const;
  readonly cluster = false;
  constructor(private readonly g: Any) {}
  async call(_key: string | undefined, args: Arg[]): Promise<unknown> {
    try {
      return glideReply(await this.g.customCommand(glideArgs(args)));
    } catch (e) {
      throw glideError(e);
    }
  }
  async nodeOf(): Promise<string> {
    return "main";
  }
  async connect(): Promise<Dedicated> {
    // With several addresses (a primary and replicas), the primary is the one to wait on.
    const addresses: Array<{ host?: string; port?: number }> = this.g.config?.addresses ?? [];
    if (addresses.length <= 1) return glideDedicated(glideAddress(this.g), glideSettings(this.g));
    const laddr = String(await this.call(undefined, ["CLIENT", "INFO"])).match(/laddr=(\S+):(\d+)/);
    const address = laddr ? { host: laddr[1] ?? "localhost", port: Number(laddr[2]) } : glideAddress(this.g);
    return glideDedicated(address, glideSettings(this.g));
  }
  commandTimeout(): number | undefined {
    // Waits run only on our own connections, with GLIDE_WAIT_TIMEOUT.
    return GLIDE_WAIT_TIMEOUT;
  }
  address(): string {
    const a = glideAddress(this.g);
    return `${a.host}:${a.port}/${this.g.config?.databaseId ?? 0}`;
  }
}

class GlideCluster implements Adapter {
  readonly library = "valkey-glide" as const;
  readonly cluster = true;
  /** The address GLIDE reaches each slot's master at (learned by asking it; dropped on MOVED). */
  private readonly masters = new Map<number, { host: string; port: number }>();
  constructor(private readonly g: Any) {}
  async call(key: string | undefined, args: Arg[]): Promise<unknown> {
    // Routed by the lock's key: GLIDE does not know module commands' keys.
    const options = key === undefined ? undefined : { route: { type: "primarySlotKey", key } };
    try {
      return glideReply(await this.g.customCommand(glideArgs(args), options));
    } catch (e) {
      const m = glideError(e);
      if (key !== undefined && isRedirect(m)) this.masters.delete(keySlot(key));
      throw m;
    }
  }
  private async master(key: string): Promise<{ host: string; port: number }> {
    const slot = keySlot(key);
    let a = this.masters.get(slot);
    if (a === undefined) {
      // The server GLIDE routes the key to tells its own address (laddr of our connection).
      const info = String(await this.call(key, ["CLIENT", "INFO"]));
      const m = /laddr=(\S+):(\d+)/.exec(info);
      if (m === null) throw new Error(`CLIENT INFO of the master of ${JSON.stringify(key)} has no laddr: ${info}`);
      a = { host: m[1] ?? "localhost", port: Number(m[2]) };
      this.masters.set(slot, a);
    }
    return a;
  }
  async nodeOf(key: string): Promise<string> {
    const a = await this.master(key);
    return `${a.host}:${a.port}`;
  }
  async connect(key: string): Promise<Dedicated> {
    const a = await this.master(key);
    try {
      const d = await glideDedicated(a, glideSettings(this.g));
      return {
        clientId: d.clientId,
        call: async (args) => {
          try {
            return await d.call(args);
          } catch (e) {
            if (isRedirect(e)) this.masters.delete(keySlot(key));
            throw e;
          }
        },
        destroy: d.destroy,
      };
    } catch (e) {
      this.masters.delete(keySlot(key));
      throw e;
    }
  }
  commandTimeout(): number | undefined {
    return GLIDE_WAIT_TIMEOUT;
  }
  address(): string {
    const nodes = (this.g.config?.addresses ?? []).map((n: Any) => `${n.host ?? "localhost"}:${n.port ?? 6379}`);
    return `cluster:${nodes.sort()[0] ?? ""}`;
  }
}

/** The adapter for a client of ioredis, node-redis or Valkey GLIDE (throws for anything else). */
export function adapt(client: unknown): Adapter {
  const c = client as Any;
  if (c && typeof c === "object") {
    if (typeof c.customCommand === "function") {
      return typeof c.fcallWithRoute === "function" ? new GlideCluster(c) : new Glide(c);
    }
    if (c.isCluster === true && typeof c.nodes === "function") return new IoRedisCluster(c);
    if (typeof c.call === "function" && typeof c.duplicate === "function" && c.options) return new IoRedis(c);
    if (typeof c.getSlotMaster === "function" && typeof c.sendCommand === "function") return new NodeRedisCluster(c);
    if (typeof c.getMasterNode === "function" && typeof c.sendCommand === "function") return new NodeRedisSentinel(c);
    if (typeof c.sendCommand === "function" && typeof c.duplicate === "function") return new NodeRedis(c);
  }
  throw new TypeError(
    "dlock-redis needs an ioredis Redis/Cluster, a node-redis client/cluster/sentinel or a Valkey GLIDE GlideClient/GlideClusterClient",
  );
}
