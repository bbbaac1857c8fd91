/**
 * Errors. Every error reply the dlock module gives for a known case is its own class,
 * with `.code` (the reply's first word, or the package's own code). The kinds of
 * docs/clients.md: lost `LockLost` (and `NotHeld`), timeout `AcquireTimeout`, wrong kind
 * `WrongKind` (and `WrongType`), module not loaded `ModuleNotLoaded`, deadlock `Deadlock`,
 * queue full `QueueFull`, not durable `NotDurable` (and `NoReplicas`), connection
 * `ConnectionError`, invalid argument `InvalidArgument`.
 */
import type { LostReason } from "./core/lease.js";

export type { LostReason };

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

/**
 * `WRONGKIND`: the key holds a lock of another kind (the message names it). Also the
 * class of `WrongType`: either way, not the lock that was asked for.
 */
export class WrongKind extends DlockError {
  constructor(message: string, options?: { cause?: unknown; code?: string }) {
    super(message, options?.code ?? "WRONGKIND", options);
  }
}

/** `WRONGTYPE`: the key holds a Redis value that is not a lock (a `WrongKind` too). */
export class WrongType extends WrongKind {
  constructor(message: string, options?: { cause?: unknown }) {
    super(
      /not a (dlock )?lock/.test(message)
        ? message
        : `${message.trim()} — the key holds a Redis value that is not a dlock lock; expected a lock (or no key)`,
      { ...options, code: "WRONGTYPE" },
    );
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


/**
 * The server does not know the command. For a `DLOCK.*` command that is
 * `ModuleNotLoaded`: the dlock module is not loaded, or is older than the command.
 * The server's own text is `.serverMessage` (and the `cause`).
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

/**
 * The dlock module is not loaded on the server (or is older than the command): a
 * `DLOCK.*` command was unknown. The message says how to check (`MODULE LIST`) and how to
 * load it (`--loadmodule`, `loadmodule`, `MODULE LOAD /path/to/libdlock.so`). An
 * `UnknownCommand` too (its `.code` stays `UNKNOWNCOMMAND`).
 */
export class ModuleNotLoaded extends UnknownCommand {}

/**
 * Bad input: refused before anything was sent, naming the argument (`.argument`: `key`,
 * `lease`, `renewInterval`, an unknown option's name, …) and what was expected — or an
 * `ERR` reply of the server to a lock command (bad option, limit mismatch, …; then
 * `.argument` is undefined).
 */
export class InvalidArgument extends DlockError {
  /** The argument or option that was wrong (undefined for a server's `ERR` reply). */
  readonly argument: string | undefined;
  constructor(message: string, options?: { cause?: unknown; argument?: string }) {
    super(message, "ERR", options);
    this.argument = options?.argument;
  }
}

/**
 * The connection to the server failed (refused, reset, closed, or no reply in time) and
 * no deadline or retry covered it — e.g. a single try (`timeout: 0`) against a server that
 * is down. The transport's own error is the `cause`. A wait with a deadline reports
 * `AcquireTimeout` instead (with the last connection error as its `cause`).
 */
export class ConnectionError extends DlockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, "CONNECTION", options);
  }
}

/** The server answered something this client does not understand. */
export class UnexpectedReply extends DlockError {
  constructor(message: string) {
    super(message, "UNEXPECTED");
  }
}

/**
 * `acquire()` was not granted within its `timeout`. When connection errors kept it from
 * asking, the last one is the `cause`.
 */
export class AcquireTimeout extends DlockError {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, "ACQUIRETIMEOUT", options);
  }
}

const LOST_WHY: Record<LostReason, string> = {
  forced: "released by someone else (DLOCK.FORCERELEASE, or the same owner elsewhere)",
  expired: "its lease ended",
  deleted: "its key was deleted",
  disconnected: "its BIND connection closed",
  unreachable: "no renewal was acknowledged before its lease would end",
  "not-held": "the server says it is no longer held",
  "no-quorum": "a majority of the servers no longer holds it",
};

/**
 * The hold was lost: the reason of its aborted `signal`, and what `withLock` throws when
 * the callback was running while the lock was lost.
 */
export class LockLost extends DlockError {
  readonly reason: LostReason;
  readonly key: string;
  constructor(key: string, reason: LostReason) {
    super(`the lock ${JSON.stringify(key)} was lost (${reason}: ${LOST_WHY[reason]})`, "LOCKLOST");
    this.key = key;
    this.reason = reason;
  }
}

/**
 * `replicas: n`: the grant did not reach `n` replicas within the time allowed (`WAIT n
 * ms` answered fewer). The hold was released before this was thrown. `NoReplicas` (the
 * server refused the grant itself) is a `NotDurable` too.
 */
export class NotDurable extends DlockError {
  readonly acknowledged: number;
  readonly wanted: number;
  constructor(
    key: string,
    acknowledged: number,
    wanted: number,
    options?: { message?: string; code?: string; cause?: unknown },
  ) {
    super(
      options?.message ?? `the grant of ${JSON.stringify(key)} reached ${acknowledged} of ${wanted} replicas; released`,
      options?.code ?? "NOTDURABLE",
      options,
    );
    this.acknowledged = acknowledged;
    this.wanted = wanted;
  }
}

/** `NOREPLICAS`: the server refused the acquire (`min-replicas-to-write`); a `NotDurable` too. */
export class NoReplicas extends NotDurable {
  constructor(message: string, options?: { cause?: unknown }) {
    super("", 0, 0, { message, code: "NOREPLICAS", cause: options?.cause });
  }
}
