// Bad input is refused before anything is sent, naming the argument (docs/clients.md,
// rule 5): every options object of the public API is checked here against its schema —
// unknown names (plain JavaScript has no type checker to catch node-redlock's or
// redis-semaphore's names), wrong types, values out of range. No I/O.
import { InvalidArgument } from "../errors.js";

/** The longest lease, wait or delay the server takes (ms): 2^40. */
export const MAX_MS = 2 ** 40;

/** A value as an error message shows it: what it is, not only what it prints as. */
export function describe(v: unknown): string {
  if (v === undefined) return "undefined";
  if (v === null) return "null";
  if (typeof v === "string") return `the string ${JSON.stringify(v)}`;
  if (typeof v === "number") return Number.isNaN(v) ? "NaN" : String(v);
  if (typeof v === "bigint") return `the bigint ${v}n`;
  if (typeof v === "boolean") return `the boolean ${v}`;
  if (typeof v === "function") return "a function";
  if (Array.isArray(v)) return "an array";
  if (Buffer.isBuffer(v)) return "a Buffer";
  return `an object (${Object.prototype.toString.call(v).slice(8, -1)})`;
}

function invalid(where: string, name: string, expected: string, got: unknown): InvalidArgument {
  return new InvalidArgument(`${where}: ${name} must be ${expected}, got ${describe(got)}`, { argument: name });
}

/** One option's check: throws `InvalidArgument` naming it. */
export type Rule = (value: unknown, name: string, where: string) => void;

const fmt = (n: number): string => (n === MAX_MS ? "2^40" : String(n));

/** A number of milliseconds in `[min, max]` (`Infinity` too when `infinite`). */
export function ms(min: number, max = MAX_MS, infinite = false): Rule {
  const expected = `a number of milliseconds from ${fmt(min)} to ${fmt(max)}${infinite ? " (or Infinity)" : ""}`;
  return (v, name, where) => {
    if (typeof v !== "number" || Number.isNaN(v)) throw invalid(where, name, expected, v);
    if (infinite && v === Infinity) return;
    if (!Number.isFinite(v) || v < min || v > max) throw invalid(where, name, expected, v);
  };
}

/** A whole number in `[min, max]`. */
export function int(min: number, max = Number.MAX_SAFE_INTEGER): Rule {
  const expected = `a whole number from ${min} to ${max === Number.MAX_SAFE_INTEGER ? "2^53-1" : max}`;
  return (v, name, where) => {
    if (typeof v !== "number" || !Number.isInteger(v) || v < min || v > max) throw invalid(where, name, expected, v);
  };
}

export const bool: Rule = (v, name, where) => {
  if (typeof v !== "boolean") throw invalid(where, name, "true or false", v);
};

export const fn: Rule = (v, name, where) => {
  if (typeof v !== "function") throw invalid(where, name, "a function", v);
};

export const text: Rule = (v, name, where) => {
  if (typeof v !== "string" || v.length === 0) throw invalid(where, name, "a non-empty string", v);
};

export const signal: Rule = (v, name, where) => {
  if (typeof AbortSignal === "undefined" || !(v instanceof AbortSignal)) throw invalid(where, name, "an AbortSignal", v);
};

/**
 * Names other lock libraries use, with this package's name for the same thing (or what
 * to do instead), so that code ported from them fails with a hint rather than silently.
 */
const FOREIGN: Record<string, { from: string; use?: string; instead?: string }> = {
  acquireTimeout: { from: "redis-semaphore", use: "timeout" },
  acquireAttemptsLimit: { from: "redis-semaphore", use: "timeout", instead: "waits queue on the server until `timeout`" },
  lockTimeout: { from: "redis-semaphore", use: "lease" },
  refreshInterval: { from: "redis-semaphore", use: "renewInterval" },
  identifier: { from: "redis-semaphore", use: "owner" },
  acquiredExternally: { from: "redis-semaphore", instead: "use `lock.attach(owner)`" },
  onLockLost: { from: "redis-semaphore", use: "onLost" },
  retryInterval: { from: "redis-semaphore", use: "timeout", instead: "waits queue on the server (no polling); `timeout` bounds them" },
  retryCount: { from: "node-redlock", use: "timeout", instead: "waits queue on the server (no retry loop); `timeout` bounds them" },
  retryJitter: { from: "node-redlock", instead: "waits queue on the server (no retry loop)" },
  driftFactor: { from: "node-redlock", instead: "the lease clock's margin is fixed (docs/clients.md)" },
  automaticExtensionThreshold: { from: "node-redlock", use: "renewInterval" },
  ttl: { from: "other lock libraries", use: "lease" },
  expire: { from: "python-redis-lock", use: "lease" },
  leaseTime: { from: "Redisson", use: "lease" },
  waitTime: { from: "Redisson", use: "timeout" },
};

function unknownOption(where: string, name: string, known: string[]): InvalidArgument {
  const f = FOREIGN[name];
  const lower = known.find((k) => k.toLowerCase() === name.toLowerCase());
  let hint = "";
  if (lower !== undefined) hint = `; did you mean "${lower}"?`;
  else if (f !== undefined) {
    const use = f.use !== undefined && known.includes(f.use) ? `; here it is "${f.use}"` : "";
    hint = ` (a ${f.from} option${use}${f.instead !== undefined && use === "" ? `: ${f.instead}` : ""})`;
  }
  return new InvalidArgument(
    `${where}: unknown option ${JSON.stringify(name)}${hint}; the options are: ${known.join(", ")}`,
    { argument: name },
  );
}

/**
 * Checks `options` (undefined or null: none) against `schema`: every own property must be
 * named there and pass its rule; an option whose value is `undefined` counts as absent.
 * Throws `InvalidArgument` naming the first wrong one.
 */
export function checkOptions(where: string, options: unknown, schema: Record<string, Rule>): void {
  if (options === undefined || options === null) return;
  if (typeof options !== "object" || Array.isArray(options)) {
    throw new InvalidArgument(`${where}: options must be an object, got ${describe(options)}`, { argument: "options" });
  }
  const known = Object.keys(schema);
  for (const [name, value] of Object.entries(options)) {
    const rule = schema[name];
    if (rule === undefined) throw unknownOption(where, name, known);
    if (value !== undefined) rule(value, name, where);
  }
}

/** A lock's key: a non-empty string. */
export function checkKey(where: string, key: unknown, name = "key"): void {
  if (typeof key !== "string" || key.length === 0) {
    throw new InvalidArgument(`${where}: ${name} must be a non-empty string, got ${describe(key)}`, { argument: name });
  }
}

/** A renew interval must be shorter than the lease it renews. */
export function checkRenewInterval(where: string, renewInterval: number, lease: number, leaseName = "watchdogLease"): void {
  if (!(renewInterval < lease)) {
    throw new InvalidArgument(
      `${where}: renewInterval must be shorter than ${leaseName} (${lease} ms), got ${renewInterval}: ` +
        "a hold renewed no sooner than its lease ends would be lost between renewals",
      { argument: "renewInterval" },
    );
  }
}

// -- the schemas of the public API --------------------------------------------------

const lease = ms(1);
const wait = ms(0, MAX_MS, true);

export const CLIENT_OPTIONS: Record<string, Rule> = {
  watchdogLease: lease,
  renewInterval: ms(1),
  waitSlice: ms(10),
  maxWaitConnections: int(1, 10000),
  ownerPrefix: text,
  onLost: fn,
};

export const ACQUIRE_OPTIONS: Record<string, Rule> = {
  timeout: wait,
  lease,
  signal,
  bind: bool,
  lockDelay: ms(0),
  replicas: int(0, 1000),
  replicasTimeout: ms(0),
  permits: int(1, 2 ** 32),
  owner: text,
};

export const ATTACH_OPTIONS: Record<string, Rule> = { lease };

export const LATCH_WAIT_OPTIONS: Record<string, Rule> = { timeout: wait, signal };

export const REDLOCK_OPTIONS: Record<string, Rule> = {
  nodeTimeout: ms(1),
  retryDelay: ms(0),
  watchdogLease: lease,
  renewInterval: ms(1),
};

export const REDLOCK_ACQUIRE_OPTIONS: Record<string, Rule> = { timeout: wait, lease, signal };

export const ELECTION_OPTIONS: Record<string, Rule> = {
  owner: text,
  lease,
  renewInterval: ms(1),
  bind: bool,
  lockDelay: ms(0),
};

export const CAMPAIGN_OPTIONS: Record<string, Rule> = { timeout: wait, signal, bind: bool, lockDelay: ms(0) };

export const RUN_ONCE_OPTIONS: Record<string, Rule> = { atMostFor: lease, atLeastFor: ms(0), renew: bool };

export const OBSERVE_OPTIONS: Record<string, Rule> = { signal };

/** A timeout of `Infinity` means no timeout. */
export function finiteOrUndefined(v: number | undefined): number | undefined {
  return v === Infinity ? undefined : v;
}
