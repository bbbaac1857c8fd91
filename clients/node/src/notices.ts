// Prompt notice (docs/clients.md, rule 2): one subscriber connection per client (per
// master in a cluster, sharded there), subscribed to a lock's channel while the client
// holds that lock; every message is handed to the holds on that key, which check
// themselves at once. After the subscription becomes active, and after the subscriber
// reconnects (what was published meanwhile is gone), every hold on it checks too. Where
// the library cannot subscribe, holds rely on their lease clock. A subscriber connection
// is closed once it has no channel left (so that no reconnect loop outlives the holds).
import type { Adapter, NoticeHandler, Subscriber } from "./adapters.js";
import { channelFor } from "./slot.js";

/** A hold that listens on its lock's channel. */
export interface Watched {
  readonly key: string;
  /** A message on the lock's channel (`subscribed` / `reconnected`: look again, nothing was said). */
  notice(message: string): void;
}

/** How long a channel stays subscribed after its last hold ended (the next acquire of the key reuses it). */
const LINGER_MS = 1000;

class Channel {
  readonly holds = new Set<Watched>();
  /** Callers waiting for the subscription (or for its failure). */
  ready: Array<() => void> = [];
  node: string | undefined;
  on = false;
  busy = false;
  again = false;
  linger: ReturnType<typeof setTimeout> | undefined;
  constructor(readonly key: string) {}
}

/** `p`, or a rejection after `ms` (the timer keeps no process alive). */
function bounded<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
  let t: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      t = setTimeout(() => reject(new Error(`${what}: no answer within ${ms} ms`)), ms);
      t.unref?.();
    }),
  ]).finally(() => clearTimeout(t));
}

export class Notices {
  private readonly channels = new Map<string, Channel>();
  private readonly subs = new Map<string, Promise<Subscriber | undefined>>();
  private closed = false;

  constructor(
    private readonly adapter: Adapter,
    /** How long making a subscriber connection, or a (un)subscribe, may take (ms). */
    private readonly within: number,
  ) {}

  /**
   * Starts listening for `h` (subscribing its channel if needed); resolves once the
   * subscription is active on the server, or could not be made (never rejects).
   */
  watch(h: Watched): Promise<void> {
    if (this.closed) return Promise.resolve();
    const name = channelFor(h.key);
    let ch = this.channels.get(name);
    if (ch === undefined) {
      ch = new Channel(h.key);
      this.channels.set(name, ch);
    }
    if (ch.linger !== undefined) {
      clearTimeout(ch.linger);
      ch.linger = undefined;
    }
    ch.holds.add(h);
    if (ch.on && !ch.busy) return Promise.resolve();
    const ready = new Promise<void>((resolve) => ch.ready.push(resolve));
    void this.sync(name, ch);
    return ready;
  }

  /** Stops listening for `h` (the channel is unsubscribed a little later if no hold is left). */
  unwatch(h: Watched): void {
    const name = channelFor(h.key);
    const ch = this.channels.get(name);
    if (ch === undefined || !ch.holds.delete(h) || ch.holds.size > 0 || this.closed) return;
    ch.linger = setTimeout(() => {
      ch.linger = undefined;
      void this.sync(name, ch);
    }, LINGER_MS);
    ch.linger.unref?.();
  }

  private handler(node: string): NoticeHandler {
    return {
      message: (channel, message) => {
        const ch = this.channels.get(channel);
        if (ch === undefined) return;
        for (const h of [...ch.holds]) h.notice(message);
      },
      reconnected: () => {
        for (const ch of this.channels.values()) {
          if (ch.node !== node || !ch.on) continue;
          for (const h of [...ch.holds]) h.notice("reconnected");
        }
      },
    };
  }

  private subscriber(node: string, key: string): Promise<Subscriber | undefined> {
    let s = this.subs.get(node);
    if (s === undefined) {
      const made = this.adapter.subscriber(key, this.handler(node), this.within).then(
        (sub) => {
          if (this.closed) sub?.close();
          return sub;
        },
        (e: unknown) => {
          if (this.subs.get(node) === made) this.subs.delete(node); // the next hold tries again
          throw e;
        },
      );
      made.catch(() => undefined);
      this.subs.set(node, made);
      s = made;
    }
    return s;
  }

  /** Closes `node`'s subscriber connection (a broken one, or one without channels). */
  private drop(node: string): void {
    const s = this.subs.get(node);
    this.subs.delete(node);
    s?.then((sub) => sub?.close(), () => undefined);
    for (const ch of this.channels.values()) if (ch.node === node) ch.on = false;
  }

  /** Makes the channel's subscription match whether it has holds (one change at a time). */
  private async sync(name: string, ch: Channel): Promise<void> {
    if (ch.busy) {
      ch.again = true;
      return;
    }
    ch.busy = true;
    try {
      do {
        ch.again = false;
        if (this.closed) return;
        const want = ch.holds.size > 0 || ch.linger !== undefined;
        if (want && !ch.on) {
          ch.node ??= await this.adapter.subscriberOf(ch.key);
          const sub = await this.subscriber(ch.node, ch.key);
          if (sub === undefined) return; // this library cannot subscribe: the lease clock decides
          try {
            await bounded(sub.subscribe(name), this.within, `SUBSCRIBE ${name}`);
          } catch (e) {
            this.drop(ch.node); // a subscriber that does not answer is made anew next time
            throw e;
          }
          ch.on = true;
          // Anything published before the subscription was active: look once.
          for (const h of [...ch.holds]) h.notice("subscribed");
        } else if (!want && ch.on) {
          const node = ch.node as string;
          const sub = await this.subs.get(node);
          ch.on = false; // (a hold that came meanwhile set `again`: subscribed anew)
          const others = [...this.channels.values()].some((c) => c !== ch && c.node === node && (c.on || c.busy || c.holds.size > 0));
          if (others) {
            await bounded(sub?.unsubscribe(name) ?? Promise.resolve(), this.within, `UNSUBSCRIBE ${name}`).catch(() => {
              this.drop(node);
            });
          } else if (!ch.again) {
            this.drop(node); // no channel left on it
          }
        }
      } while (ch.again);
      if (!ch.on && ch.holds.size === 0 && ch.linger === undefined && this.channels.get(name) === ch) {
        this.channels.delete(name);
      }
    } catch {
      // Not subscribed (the server is unreachable): the holds' lease clocks decide; the
      // next acquire of this key tries again.
      ch.on = false;
    } finally {
      ch.busy = false;
      for (const resolve of ch.ready.splice(0)) resolve();
    }
  }

  /** Closes the subscriber connections (idempotent). */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    for (const ch of this.channels.values()) {
      if (ch.linger !== undefined) clearTimeout(ch.linger);
      for (const resolve of ch.ready.splice(0)) resolve();
    }
    this.channels.clear();
    for (const s of this.subs.values()) s.then((sub) => sub?.close(), () => undefined);
    this.subs.clear();
  }
}
