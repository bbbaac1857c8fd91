/**
 * Errors. Every error reply the dlock module gives for a known case is its own class,
 * with `.code` (the reply's first word, or the package's own code).
 */

/** Base class of every error of this package. */
export class DlockError extends Error {
  /** A stable, upper-case code: `NOTHELD`, `DEADLOCK`, `ACQUIRETIMEOUT`, … */
  readonly code: string;
  constructor(message: string, code: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** `NOTHELD`: the owner does not hold the lock (never acquired, lease ended, force-released). */
export class NotHeld extends DlockError {
  constructor(message = "NOTHELD the owner does not hold this lock", options?: { cause?: unknown }) {
    super(message, "NOTHELD", options);
  }
}

/** `DEADLOCK`: waiting would close a cycle (or a second reader asked to upgrade). */
export class Deadlock extends DlockError {
  /**
   * The steps of the wait-for cycle, starting with the owner whose request was
   * refused: each `owner` waits for `waitsFor` on `key`, the last for the first.
   * Empty for the two-readers-upgrading refusal. Owners and keys are Buffers
   * (binary-safe).
   */
  readonly cycle: DeadlockStep[];
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, "DEADLOCK", options);
    this.cycle = parseCycle(message);
  }
  /** The keys of the cycle, in order. */
  get keys(): Buffer[] {
    return this.cycle.map((s) => s.key);
  }
  /** The owners of the cycle, in order. */
  get owners(): Buffer[] {
    return this.cycle.map((s) => s.owner);
  }
}

/** One step of a deadlock cycle: `owner` waits for `waitsFor` on `key`. */
export interface DeadlockStep {
  owner: Buffer;
  waitsFor: Buffer;
  key: Buffer;
}

const QUOTED = '"((?:[^"\\\\]|\\\\.)*)"';
const STEP = new RegExp(`${QUOTED} waits for ${QUOTED} on ${QUOTED}`, "g");

/** The bytes of a quoted owner or key (`\\`, `\"`, `\n`, `\r`, `\t`, `\xHH`). */
function unquote(s: string): Buffer {
  const out: number[] = [];
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c !== 0x5c || i + 1 >= s.length) {
      out.push(c & 0xff);
      continue;
    }
    const e = s[i + 1] ?? "";
    if (e === "x" && /^[0-9a-fA-F]{2}$/.test(s.slice(i + 2, i + 4))) {
      out.push(parseInt(s.slice(i + 2, i + 4), 16));
      i += 3;
    } else {
      out.push(e === "n" ? 10 : e === "r" ? 13 : e === "t" ? 9 : e.charCodeAt(0) & 0xff);
      i += 1;
    }
  }
  return Buffer.from(out);
}

/** The steps of a `DEADLOCK cycle: …` text; [] for any other text. */
export function parseCycle(message: string): DeadlockStep[] {
  const text = message.startsWith("-") ? message.slice(1) : message;
  const head = "DEADLOCK cycle: ";
  if (!text.startsWith(head)) return [];
  const steps: DeadlockStep[] = [];
  for (const m of text.slice(head.length).matchAll(STEP)) {
    steps.push({ owner: unquote(m[1] ?? ""), waitsFor: unquote(m[2] ?? ""), key: unquote(m[3] ?? "") });
  }
  return steps;
}

/** `WRONGKIND`: the key holds a lock of another kind. */
export class WrongKind extends DlockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, "WRONGKIND", options);
  }
}

/** `WRONGTYPE`: the key holds a Redis value that is not a lock. */
export class WrongType extends DlockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, "WRONGTYPE", options);
  }
}

/** `QUEUEFULL`: the lock's queue already has `dlock.max-queue` places. */
export class QueueFull extends DlockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, "QUEUEFULL", options);
  }
}

/** `FENCED`: `DLOCK.FENCED` with a token that is not live; the command did not run. */
export class Fenced extends DlockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, "FENCED", options);
  }
}

/** `NOREPLICAS`: the server refused the acquire (`min-replicas-to-write`). */
export class NoReplicas extends DlockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, "NOREPLICAS", options);
  }
}

/**
 * The server does not know the command: the dlock module is not loaded, or is older than
 * the command. The message says how to check (`MODULE LIST`) and how to load it; the
 * server's own text is `.serverMessage` (and the `cause`).
 */
export class UnknownCommand extends DlockError {
  /** The command the server did not know (e.g. `DLOCK.ACQUIRE`), when its reply named it. */
  readonly command: string | undefined;
  /** The server's reply text. */
  readonly serverMessage: string;
  constructor(message: string, options?: { cause?: unknown }) {
    const m = /unknown command [`'"]?([^`'"\s,]+)/i.exec(message);
    const command = m?.[1];
    const dlock = command === undefined || /^dlock\./i.test(command);
    super(
      dlock
        ? `${message.trim()} — is the dlock module loaded on this server? \`MODULE LIST\` shows ` +
            "the loaded modules (dlock's name is `dlock`); load it with `--loadmodule " +
            "/path/to/libdlock.so` (or `loadmodule` in redis.conf / valkey.conf, or `MODULE LOAD`), " +
            "or upgrade it when it is older than this command"
        : message,
      "UNKNOWNCOMMAND",
      options,
    );
    this.command = command;
    this.serverMessage = message;
  }
}

/** Any other `ERR` reply of a lock command (bad option, limit mismatch, …). */
export class InvalidArgument extends DlockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, "ERR", options);
  }
}

/** The server answered something this client does not understand. */
export class UnexpectedReply extends DlockError {
  constructor(message: string) {
    super(message, "UNEXPECTED");
  }
}

/** `acquire()` was not granted within its `timeout`. */
export class AcquireTimeout extends DlockError {
  constructor(message: string) {
    super(message, "ACQUIRETIMEOUT");
  }
}

/** Why a hold was lost. */
export type LostReason =
  /** A renewal or release answered that the owner holds nothing (lease ended, force-released). */
  | "not-held"
  /** No renewal got through before the lease would end. */
  | "unreachable"
  /** Taken with an explicit lease (no watchdog) and that lease has run out. */
  | "lease-ended"
  /** RedLock: a majority of the servers says the lock is gone. */
  | "no-quorum";

/**
 * The hold was lost: the reason of its aborted `signal`, and what `withLock` throws when
 * the callback was running while the lock was lost.
 */
export class LockLost extends DlockError {
  readonly reason: LostReason;
  readonly key: string;
  constructor(key: string, reason: LostReason) {
    super(`the lock ${JSON.stringify(key)} was lost (${reason})`, "LOCKLOST");
    this.key = key;
    this.reason = reason;
  }
}

/**
 * `replicas: n`: the grant did not reach `n` replicas within the time allowed (`WAIT n
 * ms` answered fewer). The hold was released before this was thrown.
 */
export class NotDurable extends DlockError {
  readonly acknowledged: number;
  readonly wanted: number;
  constructor(key: string, acknowledged: number, wanted: number) {
    super(
      `the grant of ${JSON.stringify(key)} reached ${acknowledged} of ${wanted} replicas; released`,
      "NOTDURABLE",
    );
    this.acknowledged = acknowledged;
    this.wanted = wanted;
  }
}

const BY_CODE: Record<string, new (m: string, o?: { cause?: unknown }) => DlockError> = {
  NOTHELD: NotHeld,
  DEADLOCK: Deadlock,
  WRONGKIND: WrongKind,
  WRONGTYPE: WrongType,
  QUEUEFULL: QueueFull,
  FENCED: Fenced,
  NOREPLICAS: NoReplicas,
};

const REPLY_ERRORS = new Set(["ReplyError", "ErrorReply", "SimpleError", "BlobError"]);

/** Whether `e` is an error reply of the server (not a connection error). */
export function isReplyError(e: unknown): e is Error {
  if (!(e instanceof Error)) return false;
  return REPLY_ERRORS.has(e.name) || REPLY_ERRORS.has(e.constructor?.name ?? "");
}

/**
 * The package's error for an error reply of a lock command (`e` itself otherwise). With
 * `ownErrors = false` (the inner command of `DLOCK.FENCED`), only dlock's codes map.
 */
export function mapError(e: unknown, ownErrors = true): unknown {
  if (e instanceof DlockError || !isReplyError(e)) return e;
  const msg = e.message;
  const word = msg.split(" ", 1)[0] ?? "";
  const cls = BY_CODE[word];
  if (cls !== undefined && (ownErrors || word === "FENCED")) return new cls(msg, { cause: e });
  if (!ownErrors) return e;
  const low = msg.toLowerCase();
  if (low.startsWith("unknown command") || low.startsWith("err unknown command")) {
    return new UnknownCommand(msg, { cause: e });
  }
  if (word === "ERR") return new InvalidArgument(msg, { cause: e });
  return e;
}
