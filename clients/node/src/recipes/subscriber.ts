// One subscriber connection per lock channel for the recipes (Election's terms and
// observers): a duplicate of the user's client (ioredis `Redis`, node-redis client),
// SUBSCRIBEd to the channel; each message calls every listener — and so does a reconnect
// (as "reconnected": what was published meanwhile is gone, so look again). Opened by the
// first listener, closed with the last.

/* eslint-disable @typescript-eslint/no-explicit-any */
type Any = any;

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
    throw new TypeError(
      "dlock-redis recipes: observing a lock's channel needs an ioredis Redis or a node-redis client (not a cluster: sharded channels are not supported yet)",
    );
  }

  close(): void {
    const c = this.conn;
    this.conn = undefined;
    c?.close();
  }
}
