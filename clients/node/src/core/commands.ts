// The commands this package sends, built in one place. No I/O.

export type Arg = string | Buffer | number | bigint;

/** The kind of a lock as this client takes it. */
export type Kind = "mutex" | "fair" | "read" | "write" | "semaphore";

/** The acquire command of each kind. */
export function acquireCommand(kind: Kind): string {
  switch (kind) {
    case "mutex":
      return "DLOCK.ACQUIRE";
    case "fair":
      return "DLOCK.FAIRACQUIRE";
    case "read":
    case "write":
      return "DLOCK.RWACQUIRE";
    case "semaphore":
      return "DLOCK.SEMACQUIRE";
  }
}

export interface AcquireArgs {
  kind: Kind;
  key: string;
  owner: string;
  /** The lease (ms, whole). */
  lease: number;
  /** The server-side wait (ms, whole; 0: one try). */
  wait: number;
  /** Semaphores: the limit, and the permits to take. */
  limit?: number;
  permits?: number;
  bind?: boolean;
  lockDelay?: number;
}

/** `DLOCK.*ACQUIRE key owner [READ|WRITE] [LIMIT n [PERMITS k]] PX lease WAIT ms [BIND] [LOCKDELAY ms]`. */
export function acquireArgs(a: AcquireArgs): Arg[] {
  const out: Arg[] = [acquireCommand(a.kind), a.key, a.owner];
  if (a.kind === "read") out.push("READ");
  else if (a.kind === "write") out.push("WRITE");
  else if (a.kind === "semaphore") {
    out.push("LIMIT", a.limit ?? 1);
    if (a.permits !== undefined && a.permits !== 1) out.push("PERMITS", a.permits);
  }
  out.push("PX", a.lease, "WAIT", a.wait);
  if (a.bind) out.push("BIND");
  if (a.lockDelay) out.push("LOCKDELAY", Math.ceil(a.lockDelay));
  return out;
}

/** `DLOCK.RELEASE key owner [READ|WRITE|PERMITS k]`. */
export function releaseArgs(kind: Kind, key: string, owner: string, permits = 1): Arg[] {
  const out: Arg[] = ["DLOCK.RELEASE", key, owner];
  if (kind === "read") out.push("READ");
  else if (kind === "write") out.push("WRITE");
  else if (kind === "semaphore" && permits !== 1) out.push("PERMITS", permits);
  return out;
}

/** `DLOCK.RENEW key owner PX lease`. */
export function renewArgs(key: string, owner: string, lease: number): Arg[] {
  return ["DLOCK.RENEW", key, owner, "PX", Math.ceil(lease)];
}

/** `DLOCK.CHECK key token`. */
export function checkArgs(key: string, token: bigint): Arg[] {
  return ["DLOCK.CHECK", key, token];
}

/** `DLOCK.CANCEL key owner`: gives up the owner's queue places. */
export function cancelArgs(key: string, owner: string): Arg[] {
  return ["DLOCK.CANCEL", key, owner];
}
