// A small pool of dedicated connections per server, for server-side waits.
import type { Adapter, Dedicated } from "./adapters.js";

interface Waiter {
  resolve: (c: Dedicated) => void;
  reject: (e: unknown) => void;
}

class NodePool {
  idle: Dedicated[] = [];
  open = 0;
  queue: Waiter[] = [];
}

export interface Borrowed {
  conn: Dedicated;
  /** Gives the connection back (`ok = false`: it is closed instead). */
  done(ok: boolean): void;
}

export class WaitPool {
  private readonly nodes = new Map<string, NodePool>();
  private closed = false;

  constructor(
    private readonly adapter: Adapter,
    /** Connections per server at most; more waiters queue for one (FIFO). */
    private readonly max: number,
    /** Idle connections kept per server. */
    private readonly keepIdle: number,
  ) {}

  private pool(node: string): NodePool {
    let p = this.nodes.get(node);
    if (p === undefined) {
      p = new NodePool();
      this.nodes.set(node, p);
    }
    return p;
  }

  async borrow(key: string, signal?: AbortSignal): Promise<Borrowed> {
    if (this.closed) throw new Error("dlock: the client is closed");
    const node = await this.adapter.nodeOf(key);
    const p = this.pool(node);
    const idle = p.idle.pop();
    if (idle !== undefined) return this.lend(node, key, idle);
    if (p.open >= this.max) {
      const conn = await new Promise<Dedicated>((resolve, reject) => {
        const w: Waiter = { resolve, reject };
        p.queue.push(w);
        signal?.addEventListener("abort", () => {
          const i = p.queue.indexOf(w);
          if (i >= 0) {
            p.queue.splice(i, 1);
            reject(signal.reason);
          }
        }, { once: true });
      });
      return this.lend(node, key, conn);
    }
    p.open++;
    try {
      return this.lend(node, key, await this.adapter.connect(key));
    } catch (e) {
      p.open--;
      throw e;
    }
  }

  private lend(node: string, key: string, conn: Dedicated): Borrowed {
    let returned = false;
    return {
      conn,
      done: (ok: boolean) => {
        if (returned) return;
        returned = true;
        const p = this.pool(node);
        if (!ok || this.closed) {
          conn.destroy();
          p.open--;
          // A queued borrower makes its own connection now.
          const w = p.queue.shift();
          if (w !== undefined) {
            p.open++;
            this.adapter.connect(key).then((c) => w.resolve(c), (e) => { p.open--; w.reject(e); });
          }
          return;
        }
        const w = p.queue.shift();
        if (w !== undefined) return w.resolve(conn);
        if (p.idle.length < this.keepIdle) p.idle.push(conn);
        else {
          conn.destroy();
          p.open--;
        }
      },
    };
  }

  close(): void {
    this.closed = true;
    for (const p of this.nodes.values()) {
      for (const c of p.idle.splice(0)) c.destroy();
      for (const w of p.queue.splice(0)) w.reject(new Error("dlock: the client is closed"));
    }
  }
}
