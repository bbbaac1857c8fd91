// The I/O of each library, behind one interface: ioredis (Redis, Cluster; Sentinel through
// Redis), node-redis (client, cluster, sentinel) and Valkey GLIDE (GlideClient,
// GlideClusterClient), detected from the object passed in. The rules live in core/;
// here are only calls, connections and subscriptions:
// - `call`: a command on the user's own client (routed to the key's slot in a cluster:
//   ioredis and GLIDE do not know module commands' keys) — for the user-facing commands;
// - `connect`: a connection of this package's own to the server that serves a key (a
//   duplicate of the user's client, so with its settings and timeouts), for its own
//   calls: never reconnected, never queued offline (a command that timed out is never
//   sent later), closed when a call on it gets no answer, and not keeping the process
//   alive while idle;
// - `subscribe`: a subscriber connection for the locks' channels.
import { fromGlideError, isRedirect } from "./core/classify.js";
import type { Arg } from "./core/commands.js";
import { fromGlide } from "./core/replies.js";
import { keySlot } from "./slot.js";

export type { Arg };

/** The client libraries this package works with. */
export type Library = "ioredis" | "node-redis" | "valkey-glide";

/** A connection of this package's own. */
export interface Dedicated {
  /** The server's CLIENT ID of this connection (for CLIENT UNBLOCK). */
  readonly clientId: number;
  /** Whether it closed (by either side). */
  readonly closed: boolean;
  /** A command; error replies as the library gives them (GLIDE's made replies again). */
  call(args: Arg[]): Promise<unknown>;
  /** Closes the connection at once (a blocked command on it ends on the server). */
  destroy(): void;
  /** `fn` runs once when the connection closes, whoever closed it (not for `destroy()`). */
  onClose(fn: () => void): void;
  /** Whether the connection keeps the process alive (off while idle). */
  setRef(on: boolean): void;
}

/** What a subscriber connection reports. */
export interface NoticeHandler {
  message(channel: string, message: string): void;
  /** The connection came back and subscribed again: what was published meanwhile is gone. */
  reconnected(): void;
}

/** A subscriber connection (sharded subscriptions in a cluster). */
export interface Subscriber {
  /** Resolves once the subscription is active on the server. */
  subscribe(channel: string): Promise<void>;
  unsubscribe(channel: string): Promise<void>;
  close(): void;
}

export interface Adapter {
  readonly library: Library;
  readonly cluster: boolean;
  /** A non-blocking command about `key` (undefined: any node) on the user's client. */
  call(key: string | undefined, args: Arg[]): Promise<unknown>;
  /** The address of the server that serves `key` (its slot's master in a cluster). */
  nodeOf(key: string): Promise<string>;
  /**
   * A new connection of this package's own to the server that serves `key`; rejects when
   * it is not ready within `within` ms (and closes it).
   */
  connect(key: string, within: number): Promise<Dedicated>;
  /**
   * A subscriber connection for the channels of keys served by `key`'s server (standalone:
   * the one server), made within `within` ms (else closed and rejected), or undefined when
   * this client cannot subscribe.
   */
  subscriber(key: string, handler: NoticeHandler, within: number): Promise<Subscriber | undefined>;
  /** Which subscriber connection serves `key`'s channel (its server's address; one for a whole GLIDE cluster). */
  subscriberOf(key: string): Promise<string>;
  /**
   * The reply timeout (ms) of this package's own connections, as the transport sets it
   * (ioredis `commandTimeout`/`socketTimeout`, node-redis `commandOptions.timeout`/
   * `socket.socketTimeout`, GLIDE `requestTimeout` of the connections made here);
   * undefined: none.
   */
  transportTimeout(): number | undefined;
  /** A stable name of the server or deployment (for ordering MultiLocks). */
  address(): string;
}

const str = (a: Arg): string | Buffer => (typeof a === "string" || Buffer.isBuffer(a) ? a : String(a));

/** Rejects after `ms` with a "not ready" error (the timer does not keep the process alive). */
function deadlineOf(ms: number, what: string): { promise: Promise<never>; clear(): void } {
  let t: ReturnType<typeof setTimeout> | undefined;
  const promise = new Promise<never>((_, reject) => {
    t = setTimeout(() => reject(new Error(`${what}: not ready within ${Math.round(ms)} ms`)), Math.max(0, ms));
    t.unref?.();
  });
  promise.catch(() => undefined);
  return { promise, clear: () => clearTimeout(t) };
}

const smallest = (...ts: Array<number | undefined>): number | undefined => {
  const ok = ts.filter((t): t is number => typeof t === "number" && Number.isFinite(t) && t > 0);
  return ok.length === 0 ? undefined : Math.min(...ok);
};

/* eslint-disable @typescript-eslint/no-explicit-any */
type Any = any;

// ---------------------------------------------------------------------------- ioredis

/** A duplicate of an ioredis `Redis` of this package's own: no reconnect, no resend, unref'd when idle. */
async function ioredisDedicated(base: Any, within: number): Promise<Dedicated> {
  const c = base.duplicate({
    lazyConnect: false,
    enableOfflineQueue: true, // until ready; with no reconnect nothing waits offline after that
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    reconnectOnError: null,
    autoResendUnfulfilledCommands: false,
    autoResubscribe: false,
    enableAutoPipelining: false,
  });
  let ref = true;
  let closed = false;
  const closers: Array<() => void> = [];
  c.on("error", () => {});
  c.on("connect", () => {
    if (!ref) c.stream?.unref?.();
  });
  c.once("end", () => {
    closed = true;
    for (const fn of closers.splice(0)) fn();
  });
  const limit = deadlineOf(within, "a connection of dlock-redis");
  try {
    const id = Number(await Promise.race([c.call("CLIENT", "ID"), limit.promise]));
    return {
      clientId: id,
      get closed() {
        return closed;
      },
      call: (args) => {
        const [cmd, ...rest] = args;
        return c.call(str(cmd as Arg), ...rest.map(str));
      },
      destroy: () => {
        closers.length = 0;
        c.disconnect();
      },
      onClose: (fn) => {
        if (closed) fn();
        else closers.push(fn);
      },
      setRef: (on) => {
        ref = on;
        if (on) c.stream?.ref?.();
        else c.stream?.unref?.();
      },
    };
  } catch (e) {
    closers.length = 0;
    c.disconnect();
    throw e;
  } finally {
    limit.clear();
  }
}

/** A subscriber duplicate of an ioredis `Redis` (reconnects and subscribes again by itself). */
async function ioredisSubscriber(base: Any, sharded: boolean, handler: NoticeHandler, within: number): Promise<Subscriber> {
  const sub = base.duplicate({ lazyConnect: false, enableOfflineQueue: true, autoResubscribe: true, maxRetriesPerRequest: null });
  sub.on("error", () => {});
  sub.on("connect", () => sub.stream?.unref?.());
  sub.on(sharded ? "smessage" : "message", (channel: unknown, message: unknown) =>
    handler.message(String(channel), String(message)),
  );
  let first = true;
  sub.on("ready", () => {
    if (first) {
      first = false;
      return;
    }
    // ioredis subscribes again before "ready"; the PING's reply comes after those.
    sub.ping().then(
      () => handler.reconnected(),
      () => handler.reconnected(),
    );
  });
  const limit = deadlineOf(within, "a subscriber connection of dlock-redis");
  try {
    await Promise.race([sub.ping(), limit.promise]);
  } catch (e) {
    sub.disconnect();
    throw e;
  } finally {
    limit.clear();
  }
  return {
    subscribe: async (channel) => {
      await (sharded ? sub.ssubscribe(channel) : sub.subscribe(channel));
    },
    unsubscribe: async (channel) => {
      await (sharded ? sub.sunsubscribe(channel) : sub.unsubscribe(channel));
    },
    close: () => sub.disconnect(),
  };
}

function ioredisTimeout(o: Any): number | undefined {
  return smallest(o?.commandTimeout, o?.socketTimeout);
}

class IoRedis implements Adapter {
  readonly library = "ioredis" as const;
  readonly cluster = false;
  constructor(private readonly r: Any) {}
  call(_key: string | undefined, args: Arg[]): Promise<unknown> {
    const [cmd, ...rest] = args;
    return this.r.call(str(cmd as Arg), ...rest.map(str));
  }
  async nodeOf(_key: string): Promise<string> {
    return "main";
  }
  connect(_key: string, within: number): Promise<Dedicated> {
    return ioredisDedicated(this.r, within);
  }
  subscriber(_key: string, handler: NoticeHandler, within: number): Promise<Subscriber> {
    return ioredisSubscriber(this.r, false, handler, within);
  }
  transportTimeout(): number | undefined {
    return ioredisTimeout(this.r.options);
  }
  subscriberOf(key: string): Promise<string> {
    return this.nodeOf(key);
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
      const ok = (): void => {
        this.c.off("error", bad);
        this.waitReady = undefined;
        resolve();
      };
      const bad = (e: unknown): void => {
        this.c.off("ready", ok);
        this.waitReady = undefined;
        reject(e);
      };
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

  async connect(key: string, within: number): Promise<Dedicated> {
    return ioredisDedicated(await this.node(key), within);
  }

  async subscriber(key: string, handler: NoticeHandler, within: number): Promise<Subscriber> {
    return ioredisSubscriber(await this.node(key), true, handler, within);
  }

  transportTimeout(): number | undefined {
    return ioredisTimeout(this.c.options?.redisOptions);
  }

  subscriberOf(key: string): Promise<string> {
    return this.nodeOf(key);
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
  const command = c?._commandOptions?.timeout ?? c?.options?.commandOptions?.timeout ?? c?._self?._commandOptions?.timeout;
  return smallest(command, c?.options?.socket?.socketTimeout);
}

/** A duplicate of a node-redis client of this package's own: no reconnect, unref'd when idle. */
async function nodeRedisDedicated(base: Any, within: number): Promise<Dedicated> {
  const socket = { ...(base.options?.socket ?? {}), reconnectStrategy: false };
  const c = base.duplicate({ socket, disableOfflineQueue: false });
  let closed = false;
  const closers: Array<() => void> = [];
  const gone = (): void => {
    if (closed || c.isReady) return;
    closed = true;
    for (const fn of closers.splice(0)) fn();
  };
  c.on("error", gone);
  c.on("end", gone);
  const limit = deadlineOf(within, "a connection of dlock-redis");
  try {
    await Promise.race([c.connect(), limit.promise]);
    const id = Number(await Promise.race([c.sendCommand(["CLIENT", "ID"]), limit.promise]));
    return {
      clientId: id,
      get closed() {
        return closed || !c.isOpen;
      },
      call: (args) => c.sendCommand(args.map(str)),
      destroy: () => {
        closers.length = 0;
        closed = true;
        try {
          c.destroy();
        } catch {
          // already closed
        }
      },
      onClose: (fn) => {
        if (closed) fn();
        else closers.push(fn);
      },
      setRef: (on) => (on ? c.ref?.() : c.unref?.()),
    };
  } catch (e) {
    closers.length = 0;
    try {
      c.destroy();
    } catch {
      // already closed
    }
    throw e;
  } finally {
    limit.clear();
  }
}

/** A subscriber duplicate of a node-redis client (reconnects and subscribes again by itself). */
async function nodeRedisSubscriber(base: Any, sharded: boolean, handler: NoticeHandler, within: number): Promise<Subscriber> {
  const sub = base.duplicate();
  sub.on?.("error", () => {});
  const limit = deadlineOf(within, "a subscriber connection of dlock-redis");
  try {
    await Promise.race([sub.connect(), limit.promise]);
  } catch (e) {
    try {
      sub.destroy(); // also ends its reconnect loop
    } catch {
      // already closed
    }
    throw e;
  } finally {
    limit.clear();
  }
  sub.unref?.();
  // node-redis subscribes again as it reconnects; every "ready" after the first is one.
  sub.on?.("ready", () => handler.reconnected());
  const listeners = new Map<string, (message: unknown) => void>();
  return {
    subscribe: async (channel) => {
      const fn = (message: unknown): void => handler.message(channel, String(message));
      listeners.set(channel, fn);
      await (sharded ? sub.sSubscribe(channel, fn) : sub.subscribe(channel, fn));
    },
    unsubscribe: async (channel) => {
      const fn = listeners.get(channel);
      listeners.delete(channel);
      await (sharded ? sub.sUnsubscribe(channel, fn) : sub.unsubscribe(channel, fn));
    },
    close: () => {
      try {
        sub.destroy();
      } catch {
        // already closed
      }
    },
  };
}

class NodeRedis implements Adapter {
  readonly library = "node-redis" as const;
  readonly cluster = false;
  constructor(private readonly r: Any) {}
  call(_key: string | undefined, args: Arg[]): Promise<unknown> {
    return this.r.sendCommand(args.map(str));
  }
  async nodeOf(_key: string): Promise<string> {
    return "main";
  }
  connect(_key: string, within: number): Promise<Dedicated> {
    return nodeRedisDedicated(this.r, within);
  }
  subscriber(_key: string, handler: NoticeHandler, within: number): Promise<Subscriber> {
    return nodeRedisSubscriber(this.r, false, handler, within);
  }
  transportTimeout(): number | undefined {
    return nodeRedisTimeout(this.r);
  }
  subscriberOf(key: string): Promise<string> {
    return this.nodeOf(key);
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
  private async nodeClient(key: string): Promise<Any> {
    return this.c.nodeClient(this.c.getSlotMaster(keySlot(key)));
  }
  async connect(key: string, within: number): Promise<Dedicated> {
    return nodeRedisDedicated(await this.nodeClient(key), within);
  }
  async subscriber(key: string, handler: NoticeHandler, within: number): Promise<Subscriber> {
    return nodeRedisSubscriber(await this.nodeClient(key), true, handler, within);
  }
  transportTimeout(): number | undefined {
    const d = this.c._options?.defaults ?? this.c.options?.defaults;
    return nodeRedisTimeout({ options: d }) ?? 5000;
  }
  subscriberOf(key: string): Promise<string> {
    return this.nodeOf(key);
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
  async nodeOf(_key: string): Promise<string> {
    return "main";
  }
  async connect(_key: string, within: number): Promise<Dedicated> {
    // A sentinel client of its own (one master connection): it follows failovers too.
    const c = this.s.duplicate({ masterPoolSize: 1 });
    let closed = false;
    const closers: Array<() => void> = [];
    c.on("error", () => {});
    c.on?.("end", () => {
      closed = true;
      for (const fn of closers.splice(0)) fn();
    });
    const limit = deadlineOf(within, "a connection of dlock-redis");
    try {
      await Promise.race([c.connect(), limit.promise]);
      const id = Number(await Promise.race([c.sendCommand(false, ["CLIENT", "ID"]), limit.promise]));
      return {
        clientId: id,
        get closed() {
          return closed;
        },
        call: (args) => c.sendCommand(false, args.map(str)),
        destroy: () => {
          closers.length = 0;
          closed = true;
          c.destroy();
        },
        onClose: (fn) => {
          if (closed) fn();
          else closers.push(fn);
        },
        setRef: () => {}, // a sentinel client has no unref: close() ends it
      };
    } catch (e) {
      closers.length = 0;
      try {
        c.destroy();
      } catch {
        // already closed
      }
      throw e;
    } finally {
      limit.clear();
    }
  }
  subscriber(_key: string, handler: NoticeHandler, within: number): Promise<Subscriber> {
    return nodeRedisSubscriber(this.s, false, handler, within);
  }
  transportTimeout(): number | undefined {
    return nodeRedisTimeout(this.s) ?? nodeRedisTimeout({ options: this.s._options?.nodeClientOptions });
  }
  subscriberOf(key: string): Promise<string> {
    return this.nodeOf(key);
  }
  address(): string {
    return `sentinel:${this.s._options?.name ?? this.s.options?.name ?? ""}`;
  }
}

// ----------------------------------------------------------------------- Valkey GLIDE

/**
 * The request timeout (ms) of the GLIDE connections this package makes itself. GLIDE's
 * default (250 ms) would cut a server-side wait; slices are sized below this, and below
 * GLIDE's slow-reply warning (at 85 % of the request timeout).
 */
export const GLIDE_WAIT_TIMEOUT = 10000;

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

/** GLIDE talks to its core over a local socket: unref'd, the client keeps no process alive. */
function glideSetRef(c: Any, on: boolean): void {
  const s = c?.socket;
  if (on) s?.ref?.();
  else s?.unref?.();
}

/** A GLIDE client created within `within` ms, or closed as soon as it arrives. */
async function glideCreate(make: () => Promise<Any>, within: number): Promise<Any> {
  const pending = make();
  const limit = deadlineOf(within, "a GLIDE connection of dlock-redis");
  try {
    return await Promise.race([pending, limit.promise]);
  } catch (e) {
    pending.then((c: Any) => c.close(), () => undefined);
    throw e;
  } finally {
    limit.clear();
  }
}

/** A standalone GLIDE client of our own to one server. */
async function glideDedicated(address: { host: string; port: number }, settings: Record<string, unknown>, within: number): Promise<Dedicated> {
  const glide = await loadGlide();
  const start = performance.now();
  const c = await glideCreate(
    () =>
      glide.GlideClient.createClient({
        ...settings,
        addresses: [address],
        requestTimeout: GLIDE_WAIT_TIMEOUT,
        // One retry while connecting: a refused connection is an answer within ~0.1 s (a
        // wait retries within its deadline itself). (`numberOfRetries: 0` stalls GLIDE
        // 2.5's other clients once such a connection drops.)
        connectionBackoff: { numberOfRetries: 1, factor: 50, exponentBase: 2 },
      }),
    within,
  );
  within -= performance.now() - start;
  let closed = false;
  const send = async (args: Arg[]): Promise<unknown> => {
    try {
      return fromGlide(await c.customCommand(glideArgs(args)));
    } catch (e) {
      throw fromGlideError(e);
    }
  };
  const limit = deadlineOf(within, "a GLIDE connection of dlock-redis");
  try {
    const id = Number(await Promise.race([send(["CLIENT", "ID"]), limit.promise]));
    return {
      clientId: id,
      get closed() {
        return closed;
      },
      call: send,
      destroy: () => {
        closed = true;
        c.close();
      },
      // GLIDE reconnects by itself and does not tell: a bound hold's end comes as a notice.
      onClose: () => {},
      setRef: (on) => glideSetRef(c, on),
    };
  } catch (e) {
    c.close();
    throw e;
  } finally {
    limit.clear();
  }
}

/**
 * A GLIDE subscriber of our own (RESP3, as GLIDE's pub/sub needs), subscribing as channels
 * are added (GLIDE's dynamic `subscribe` / `ssubscribe`, in 2.5). GLIDE subscribes again after a reconnect without
 * telling: a new `CLIENT ID`, asked each second while something is subscribed, says it did.
 */
async function glideSubscriber(g: Any, cluster: boolean, handler: NoticeHandler, within: number): Promise<Subscriber | undefined> {
  const glide = await loadGlide();
  const Client = cluster ? glide.GlideClusterClient : glide.GlideClient;
  const { protocol: _protocol, ...settings } = glideSettings(g);
  const sub = await glideCreate(
    () =>
      Client.createClient({
        ...settings,
        addresses: g.config?.addresses ?? [{ host: "localhost", port: 6379 }],
        requestTimeout: GLIDE_WAIT_TIMEOUT,
        pubsubSubscriptions: {
          channelsAndPatterns: {},
          callback: (msg: { channel: unknown; message: unknown }) => handler.message(String(msg.channel), String(msg.message)),
        },
      }),
    within,
  );
  const subscribe = cluster ? sub.ssubscribe : sub.subscribe;
  const unsubscribe = cluster ? sub.sunsubscribe : sub.unsubscribe;
  if (typeof subscribe !== "function" || typeof unsubscribe !== "function") {
    sub.close();
    return undefined; // an older GLIDE: holds fall back to the lease clock
  }
  glideSetRef(sub, false);
  const channels = new Set<string>();
  const idOf = async (): Promise<string | undefined> => {
    try {
      return String(await sub.customCommand(["CLIENT", "ID"]));
    } catch {
      return undefined;
    }
  };
  let id = cluster ? undefined : await idOf();
  let watch: ReturnType<typeof setInterval> | undefined;
  let closed = false;
  const watching = (): void => {
    if (cluster || closed) return;
    if (channels.size > 0 && watch === undefined) {
      watch = setInterval(() => {
        void idOf().then((now) => {
          if (closed || now === undefined) return;
          if (id !== undefined && now !== id) handler.reconnected();
          id = now;
        });
      }, 1000);
      watch.unref?.();
    } else if (channels.size === 0 && watch !== undefined) {
      clearInterval(watch);
      watch = undefined;
    }
  };
  return {
    subscribe: async (channel) => {
      channels.add(channel);
      watching();
      await subscribe.call(sub, new Set([channel]), GLIDE_WAIT_TIMEOUT);
    },
    unsubscribe: async (channel) => {
      channels.delete(channel);
      watching();
      await unsubscribe.call(sub, new Set([channel]), GLIDE_WAIT_TIMEOUT);
    },
    close: () => {
      closed = true;
      if (watch !== undefined) clearInterval(watch);
      sub.close();
    },
  };
}

function glideAddress(c: Any): { host: string; port: number } {
  const a = c?.config?.addresses?.[0] ?? {};
  return { host: a.host ?? "localhost", port: a.port ?? 6379 };
}

class Glide implements Adapter {
  readonly library = "valkey-glide" as const;
  readonly cluster = false;
  private primary: { host: string; port: number } | undefined;
  constructor(private readonly g: Any) {}
  async call(_key: string | undefined, args: Arg[]): Promise<unknown> {
    try {
      return fromGlide(await this.g.customCommand(glideArgs(args)));
    } catch (e) {
      throw fromGlideError(e);
    }
  }
  async nodeOf(_key: string): Promise<string> {
    return "main";
  }
  async connect(_key: string, within: number): Promise<Dedicated> {
    // With several addresses (a primary and replicas), the primary is the one to use.
    const addresses: Array<{ host?: string; port?: number }> = this.g.config?.addresses ?? [];
    if (addresses.length <= 1) return glideDedicated(glideAddress(this.g), glideSettings(this.g), within);
    if (this.primary === undefined) {
      const laddr = String(await this.call(undefined, ["CLIENT", "INFO"])).match(/laddr=(\S+):(\d+)/);
      this.primary = laddr ? { host: laddr[1] ?? "localhost", port: Number(laddr[2]) } : glideAddress(this.g);
    }
    return glideDedicated(this.primary, glideSettings(this.g), within);
  }
  subscriber(_key: string, handler: NoticeHandler, within: number): Promise<Subscriber | undefined> {
    return glideSubscriber(this.g, false, handler, within);
  }
  transportTimeout(): number | undefined {
    // This package's calls run only on its own connections, with GLIDE_WAIT_TIMEOUT.
    return GLIDE_WAIT_TIMEOUT;
  }
  subscriberOf(key: string): Promise<string> {
    return this.nodeOf(key);
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
      return fromGlide(await this.g.customCommand(glideArgs(args), options));
    } catch (e) {
      const m = fromGlideError(e);
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
  async connect(key: string, within: number): Promise<Dedicated> {
    const a = await this.master(key);
    try {
      const d = await glideDedicated(a, glideSettings(this.g), within);
      return {
        clientId: d.clientId,
        get closed() {
          return d.closed;
        },
        call: async (args) => {
          try {
            return await d.call(args);
          } catch (e) {
            if (isRedirect(e)) this.masters.delete(keySlot(key));
            throw e;
          }
        },
        destroy: () => d.destroy(),
        onClose: (fn) => d.onClose(fn),
        setRef: (on) => d.setRef(on),
      };
    } catch (e) {
      this.masters.delete(keySlot(key));
      throw e;
    }
  }
  subscriber(_key: string, handler: NoticeHandler, within: number): Promise<Subscriber | undefined> {
    return glideSubscriber(this.g, true, handler, within);
  }
  transportTimeout(): number | undefined {
    return GLIDE_WAIT_TIMEOUT;
  }
  async subscriberOf(): Promise<string> {
    return "cluster"; // one GlideClusterClient subscribes to every shard
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
