// This package's own connections, per server: one control connection for its calls that
// do not wait on the server (first tries, renewals, releases, checks, cancels), and a
// small pool of waiting connections (one server-side wait at a time each). Every call is
// bounded: a call that gets no answer in time closes its connection, so a reply that
// never came cannot answer a later call, and a command that timed out is never sent
// later (these connections neither reconnect nor queue offline). Idle connections keep no
// process alive; a call the caller awaits does.
import type { Adapter, Arg, Dedicated } from "./adapters.js";
import { isNoAnswer, mapError } from "./core/classify.js";
import { ConnectionError } from "./errors.js";

/** How a call is sent. */
export interface CallOptions {
  /** How long to wait for the answer (ms); then the connection is closed and `ConnectionError` thrown. */
  within: number;
  /** Work of the package's own (renewals, cancels): it does not keep the process alive. */
  background?: boolean;
}

/** Runs `args` on `conn` within `within` ms: the reply, a mapped error reply, or `ConnectionError` (the connection closed). */
export async function callOn(conn: Dedicated, node: string, args: Arg[], within: number): Promise<unknown> {
  let t: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    t = setTimeout(
      () => reject(new ConnectionError(`${String(args[0])} got no reply from ${node} within ${Math.round(within)} ms`)),
      Math.max(0, within),
    );
    t.unref?.();
  });
  try {
    return await Promise.race([conn.call(args), late]);
  } catch (e) {
    const m = mapError(e);
    if (!isNoAnswer(m)) throw m;
    conn.destroy();
    if (m instanceof ConnectionError) throw m;
    throw new ConnectionError(`${String(args[0])} to ${node} failed: ${errorText(e)}`, { cause: e });
  } finally {
    clearTimeout(t);
  }
}

function errorText(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** Connects within `within` ms, a failure as `ConnectionError` naming the server. */
async function open(adapter: Adapter, key: string, node: string, within: number): Promise<Dedicated> {
  try {
    return await adapter.connect(key, within);
  } catch (e) {
    throw new ConnectionError(`could not connect to ${node}: ${errorText(e)}`, { cause: e });
  }
}

class Control {
  conn: Dedicated | undefined;
  connecting: Promise<Dedicated> | undefined;
  foreground = 0;
  /** Calls started and not settled: after `close()` they may finish (each is bounded). */
  inflight = 0;
}

interface Waiter {
  resolve: (c: Dedicated) => void;
  reject: (e: unknown) => void;
}

class NodePool {
  idle: Dedicated[] = [];
  open = 0;
  queue: Waiter[] = [];
}

/** A waiting connection lent out of the pool. */
export interface Borrowed {
  readonly conn: Dedicated;
  readonly node: string;
  /** Gives the connection back (`ok = false`: it is closed instead). */
  done(ok: boolean): void;
  /** Takes the connection out of the pool for good (a BIND hold's): the caller closes it. */
  keep(): Dedicated;
}

export class Connections {
  private readonly control = new Map<string, Control>();
  private readonly nodes = new Map<string, NodePool>();
  /** Waiting connections lent out now (closed by `close()`: a wait in flight ends). */
  private readonly lent = new Set<Dedicated>();
  private closed = false;

  constructor(
    private readonly adapter: Adapter,
    /** Waiting connections per server at most; more waiters queue for one (FIFO). */
    private readonly max: number,
    /** Idle waiting connections kept per server. */
    private readonly keepIdle: number,
    /** How long connecting may take when the caller allows longer (ms). */
    private readonly connectTimeout: number,
  ) {}

  private closedError(): ConnectionError {
    return new ConnectionError("dlock-redis: the client is closed (close() was called)");
  }

  /** The server that serves `key`, within `within` ms. */
  async nodeOf(key: string, within: number): Promise<string> {
    let t: ReturnType<typeof setTimeout> | undefined;
    try {
      return await Promise.race([
        this.adapter.nodeOf(key),
        new Promise<never>((_, reject) => {
          t = setTimeout(() => reject(new ConnectionError(`the server of ${JSON.stringify(key)} is not known within ${Math.round(within)} ms`)), within);
          t.unref?.();
        }),
      ]);
    } catch (e) {
      throw e instanceof ConnectionError ? e : new ConnectionError(`the server of ${JSON.stringify(key)} is not known: ${errorText(e)}`, { cause: e });
    } finally {
      clearTimeout(t);
    }
  }

  private controlOf(node: string): Control {
    let c = this.control.get(node);
    if (c === undefined) {
      c = new Control();
      this.control.set(node, c);
    }
    return c;
  }

  /** The control connection to `node` (made, or made again, as needed). */
  private async controlConn(c: Control, key: string, node: string, within: number): Promise<Dedicated> {
    if (c.conn !== undefined && !c.conn.closed) return c.conn;
    c.conn = undefined;
    if (c.connecting === undefined) {
      const p = open(this.adapter, key, node, this.connectTimeout).then(
        (conn) => {
          if (c.connecting === p) c.connecting = undefined;
          if (this.closed && c.inflight === 0) {
            conn.destroy();
            throw this.closedError();
          }
          conn.setRef(c.foreground > 0);
          c.conn = conn;
          conn.onClose(() => {
            if (c.conn === conn) c.conn = undefined;
          });
          return conn;
        },
        (e: unknown) => {
          if (c.connecting === p) c.connecting = undefined;
          throw e;
        },
      );
      p.catch(() => undefined);
      c.connecting = p;
    }
    let t: ReturnType<typeof setTimeout> | undefined;
    try {
      return await Promise.race([
        c.connecting,
        new Promise<never>((_, reject) => {
          t = setTimeout(() => reject(new ConnectionError(`could not connect to ${node} within ${Math.round(within)} ms`)), within);
          t.unref?.();
        }),
      ]);
    } finally {
      clearTimeout(t);
    }
  }

  /**
   * A call that does not wait on the server, on the control connection to `key`'s server.
   * Once started it may finish after `close()` (within its bound): a give-up's CANCEL
   * right before `close()` still reaches the server.
   */
  async request(key: string, args: Arg[], o: CallOptions): Promise<unknown> {
    if (this.closed) throw this.closedError();
    const start = performance.now();
    const node = await this.nodeOf(key, o.within);
    const c = this.controlOf(node);
    c.inflight += 1;
    if (!o.background) {
      c.foreground += 1;
      c.conn?.setRef(true);
    }
    try {
      const conn = await this.controlConn(c, key, node, Math.max(1, o.within - (performance.now() - start)));
      const left = Math.max(1, o.within - (performance.now() - start));
      try {
        return await callOn(conn, node, args, left);
      } finally {
        if (conn.closed && c.conn === conn) c.conn = undefined;
      }
    } finally {
      c.inflight -= 1;
      if (!o.background) {
        c.foreground -= 1;
        if (c.foreground === 0) c.conn?.setRef(false);
      }
      if (this.closed && c.inflight === 0) {
        c.conn?.destroy();
        c.conn = undefined;
      }
    }
  }

  /** One call on a new connection of its own, closed after it (the retry of a failed release). */
  async fresh(key: string, args: Arg[], within: number): Promise<unknown> {
    if (this.closed) throw this.closedError();
    const start = performance.now();
    const node = await this.nodeOf(key, within);
    const conn = await open(this.adapter, key, node, Math.max(1, within - (performance.now() - start)));
    try {
      return await callOn(conn, node, args, Math.max(1, within - (performance.now() - start)));
    } finally {
      conn.destroy();
    }
  }

  private pool(node: string): NodePool {
    let p = this.nodes.get(node);
    if (p === undefined) {
      p = new NodePool();
      this.nodes.set(node, p);
    }
    return p;
  }

  /** A waiting connection to `key`'s server within `within` ms (queued FIFO when `max` are lent). */
  async borrow(key: string, within: number, signal?: AbortSignal): Promise<Borrowed> {
    if (this.closed) throw this.closedError();
    const start = performance.now();
    const node = await this.nodeOf(key, within);
    const p = this.pool(node);
    let idle = p.idle.pop();
    while (idle !== undefined && idle.closed) {
      p.open--;
      idle = p.idle.pop();
    }
    if (idle !== undefined) return this.lend(node, key, idle);
    const left = (): number => Math.max(1, within - (performance.now() - start));
    if (p.open >= this.max) {
      const conn = await new Promise<Dedicated>((resolve, reject) => {
        let t: ReturnType<typeof setTimeout> | undefined;
        const leave = (e: unknown): void => {
          const i = p.queue.indexOf(w);
          if (i >= 0) {
            p.queue.splice(i, 1);
            reject(e);
          }
        };
        const onAbort = (): void => leave(signal?.reason);
        const w: Waiter = {
          resolve: (c) => {
            clearTimeout(t);
            signal?.removeEventListener("abort", onAbort);
            resolve(c);
          },
          reject: (e) => {
            clearTimeout(t);
            signal?.removeEventListener("abort", onAbort);
            reject(e);
          },
        };
        p.queue.push(w);
        t = setTimeout(() => leave(new ConnectionError(`no waiting connection to ${node} was free within ${Math.round(within)} ms`)), left());
        t.unref?.();
        signal?.addEventListener("abort", onAbort, { once: true });
      });
      return this.lend(node, key, conn);
    }
    p.open++;
    try {
      return this.lend(node, key, await open(this.adapter, key, node, Math.min(left(), this.connectTimeout)));
    } catch (e) {
      p.open--;
      this.serveQueue(node, key, p);
      throw e;
    }
  }

  /** A queued borrower makes its own connection now (one closed or failed). */
  private serveQueue(node: string, key: string, p: NodePool): void {
    const w = p.queue.shift();
    if (w === undefined) return;
    p.open++;
    open(this.adapter, key, node, this.connectTimeout).then(
      (c) => w.resolve(c),
      (e: unknown) => {
        p.open--;
        w.reject(e);
      },
    );
  }

  private lend(node: string, key: string, conn: Dedicated): Borrowed {
    let returned = false;
    if (this.closed) conn.destroy();
    conn.setRef(true);
    this.lent.add(conn);
    const p = this.pool(node);
    return {
      conn,
      node,
      done: (ok: boolean) => {
        if (returned) return;
        returned = true;
        this.lent.delete(conn);
        if (!ok || this.closed || conn.closed) {
          conn.destroy();
          p.open--;
          this.serveQueue(node, key, p);
          return;
        }
        const w = p.queue.shift();
        if (w !== undefined) return w.resolve(conn);
        if (p.idle.length < this.keepIdle) {
          conn.setRef(false);
          p.idle.push(conn);
        } else {
          conn.destroy();
          p.open--;
        }
      },
      keep: () => {
        if (!returned) {
          returned = true;
          this.lent.delete(conn);
          p.open--;
          this.serveQueue(node, key, p);
        }
        return conn;
      },
    };
  }

  /**
   * Closes every connection of this package's own (idempotent); a control connection with
   * calls in flight closes as soon as they settle (each is bounded).
   */
  close(): void {
    this.closed = true;
    for (const c of this.control.values()) {
      if (c.inflight > 0) continue;
      c.conn?.destroy();
      c.conn = undefined;
    }
    for (const p of this.nodes.values()) {
      for (const c of p.idle.splice(0)) c.destroy();
      for (const w of p.queue.splice(0)) w.reject(this.closedError());
    }
    for (const c of this.lent) c.destroy();
    this.lent.clear();
  }
}
