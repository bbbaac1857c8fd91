// One subscriber connection per lock channel for the recipes (Election's terms and
// observers): a duplicate of the user's client (ioredis `Redis`, node-redis client),
// SUBSCRIBEd to the channel; each message calls every listener — and so does a reconnect
// (as "reconnected": what was published meanwhile is gone, so look again). Opened by the
// first listener, closed with the last.

/* eslint-disable @typescript-eslint/no-explicit-any */
type Any = any;

import { glideSettings, loadGlide } from "../adapters.js";

export type Listener = (message: string) => void;

export class Subscriber {
  private readonly listeners = new Set<Listener>();
  private conn: { close(): void } | undefined;
  private opening: Promise<void> | undefined;

  constructor(
    private readonly redis: unknown,
    readonly channel: string,
  ) {}

  /** Adds `fn`; resolves once the subscription is active on the server (nothing missed after). */
  async add(fn: Listener): Promise<void> {
    this.listeners.add(fn);
    try {
      await this.open();
    } catch (e) {
      this.remove(fn);
      throw e;
    }
  }

  remove(fn: Listener): void {
    this.listeners.delete(fn);
    if (this.listeners.size === 0) this.close();
  }

  private deliver(message: string): void {
    for (const fn of [...this.listeners]) {
      try {
        fn(message);
      } catch {
        // a listener must not stop the others
      }
    }
  }

  private open(): Promise<void> {
    if (this.conn !== undefined) return Promise.resolve();
    this.opening ??= this.connect().then(
      (c) => {
        this.opening = undefined;
        if (this.listeners.size === 0) c.close();
        else this.conn = c;
      },
      (e: unknown) => {
        this.opening = undefined;
        throw e;
      },
    );
    return this.opening;
  }

  private async connect(): Promise<{ close(): void }> {
    const r = this.redis as Any;
    const onMessage = (message: unknown): void => this.deliver(String(message));
    if (r && typeof r.call === "function" && typeof r.duplicate === "function" && r.options && !r.isCluster) {
      // ioredis
      const sub = r.duplicate({ lazyConnect: false, enableOfflineQueue: true });
      sub.on("error", () => {});
      sub.on("message", (channel: unknown, message: unknown) => {
        if (String(channel) === this.channel) onMessage(message);
      });
      try {
        await sub.subscribe(this.channel);
      } catch (e) {
        sub.disconnect();
        throw e;
      }
      // ioredis subscribes again after a reconnect; what was published meanwhile is gone.
      // (The PING's reply comes after the SUBSCRIBE's: then the channel is watched again.)
      sub.on("ready", () => {
        sub.ping().then(() => onMessage("reconnected"), () => onMessage("reconnected"));
      });
      return { close: () => sub.disconnect() };
    }
    if (r && typeof r.sendCommand === "function" && typeof r.duplicate === "function" && typeof r.getSlotMaster !== "function") {
      // node-redis (a client; a sentinel client has the same subscribe)
      const sub = r.duplicate();
      sub.on?.("error", () => {});
      await sub.connect();
      try {
        await sub.subscribe(this.channel, (message: unknown) => onMessage(message));
        sub.on?.("ready", () => onMessage("reconnected"));
      } catch (e) {
        (sub.destroy ?? sub.disconnect).call(sub);
        throw e;
      }
      return { close: () => void (sub.destroy ?? sub.disconnect).call(sub) };
    }
    if (r && typeof r.customCommand === "function" && typeof r.fcallWithRoute !== "function") {
      // Valkey GLIDE (GlideClient): a client of our own subscribed from its creation (RESP3,
      // as GLIDE's pub/sub needs); GLIDE subscribes again after a reconnect.
      const glide = await loadGlide();
      const { protocol: _protocol, ...settings } = glideSettings(r);
      const sub = await glide.GlideClient.createClient({
        ...settings,
        addresses: r.config?.addresses ?? [{ host: "localhost", port: 6379 }],
        pubsubSubscriptions: {
          channelsAndPatterns: { 0: new Set([this.channel]) }, // 0: PubSubChannelModes.Exact
          callback: (msg: { channel: unknown; message: unknown }) => {
            if (String(msg.channel) === this.channel) onMessage(msg.message);
          },
        },
      });
      try {
        // Active on the server before add() resolves (as SUBSCRIBE's reply is elsewhere).
        for (let i = 0; typeof sub.getSubscriptions === "function"; i++) {
          const state = await sub.getSubscriptions();
          const actual: Set<unknown> | undefined = state?.actualSubscriptions?.[0];
          if (actual === undefined || [...actual].some((c) => String(c) === this.channel)) break;
          if (i >= 500) throw new Error(`GLIDE did not subscribe to ${this.channel} within 5 s`);
          await new Promise((resolve) => setTimeout(resolve, 10));
        }
      } catch (e) {
        sub.close();
        throw e;
      }
      // GLIDE reconnects and subscribes again without telling: a new CLIENT ID (asked
      // every second) says it did, and what was published meanwhile is gone.
      const idOf = async (): Promise<string | undefined> => {
        try {
          return String(await sub.customCommand(["CLIENT", "ID"]));
        } catch {
          return undefined;
        }
      };
      let id = await idOf();
      let closed = false;
      const watch = setInterval(() => {
        void idOf().then((now) => {
          if (closed || now === undefined) return;
          if (id !== undefined && now !== id) onMessage("reconnected");
          id = now;
        });
      }, 1000);
      watch.unref?.();
      return {
        close: () => {
          closed = true;
          clearInterval(watch);
          sub.close();
        },
      };
    }
    throw new TypeError(
      "dlock-redis recipes: observing a lock's channel needs an ioredis Redis, a node-redis client or a GLIDE GlideClient (not a cluster: sharded channels are not supported yet)",
    );
  }

  close(): void {
    const c = this.conn;
    this.conn = undefined;
    c?.close();
  }
}
