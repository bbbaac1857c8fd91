// Error mapping (docs/clients.md, rule 5): an error reply of the server, as each library
// reports it, to this package's error class; and which errors mean "no answer" (the
// connection failed or timed out) as opposed to an answer. No I/O.
import {
  ConnectionError,
  Deadlock,
  DlockError,
  Fenced,
  InvalidArgument,
  ModuleNotLoaded,
  NoReplicas,
  NotHeld,
  QueueFull,
  UnknownCommand,
  WrongKind,
  WrongType,
} from "../errors.js";

const BY_CODE: Record<string, new (m: string, o?: { cause?: unknown }) => DlockError> = {
  NOTHELD: NotHeld,
  DEADLOCK: Deadlock,
  WRONGKIND: WrongKind,
  WRONGTYPE: WrongType,
  QUEUEFULL: QueueFull,
  FENCED: Fenced,
  NOREPLICAS: NoReplicas,
};

/** Class names of the libraries' error replies (ioredis, node-redis, GLIDE as normalised below). */
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
    const u = new UnknownCommand(msg, { cause: e });
    return u.command === undefined || /^dlock\./i.test(u.command) ? new ModuleNotLoaded(msg, { cause: e }) : u;
  }
  if (word === "ERR") return new InvalidArgument(msg, { cause: e });
  return e;
}

/**
 * Whether `e` (as `mapError` left it) means the call got no answer: the connection
 * failed, closed or timed out. Every error reply, and every error of this package that
 * stands for an answer, is not.
 */
export function isNoAnswer(e: unknown): boolean {
  if (e instanceof ConnectionError) return true;
  if (e instanceof DlockError) return false;
  return !isReplyError(e);
}

/** GLIDE's names of the error kinds it takes off a reply, back to the reply's first word. */
const GLIDE_KINDS: Record<string, string> = {
  ResponseError: "ERR",
  TypeError: "WRONGTYPE",
  ExecAbortError: "EXECABORT",
  BusyLoadingError: "LOADING",
  NoScriptError: "NOSCRIPT",
  CrossSlot: "CROSSSLOT",
  ReadOnly: "READONLY",
  MasterDown: "MASTERDOWN",
  ClusterDown: "CLUSTERDOWN",
  TryAgain: "TRYAGAIN",
  NotBusy: "NOTBUSY",
  Moved: "MOVED",
  Ask: "ASK",
  NoAuth: "NOAUTH",
  NoPerm: "NOPERM",
};

/** An error reply of the server, as GLIDE reports it, with the reply's own text. */
export class GlideReplyError extends Error {
  constructor(message: string, cause: unknown) {
    super(message, { cause });
    this.name = "ReplyError";
  }
}

/**
 * GLIDE's error for an error reply (a `RequestError` whose text is the reply's) made the
 * reply's own text again: `NOTHELD: the owner…` → `NOTHELD the owner…`, `An error was
 * signalled by the server: - ResponseError: unknown command…` → `ERR unknown command…`.
 * Timeouts, connection and closing errors stay GLIDE's.
 */
export function fromGlideError(e: unknown): unknown {
  if (!(e instanceof Error)) return e;
  const kind = e.constructor?.name ?? e.name;
  if (kind !== "RequestError") return e;
  const msg = e.message;
  const signalled = /^An error was signalled by the server: - (\w+): ?([\s\S]*)$/.exec(msg);
  if (signalled !== null) {
    const word = GLIDE_KINDS[signalled[1] ?? ""] ?? signalled[1] ?? "ERR";
    return new GlideReplyError(`${word} ${signalled[2] ?? ""}`, e);
  }
  const coded = /^([A-Z][A-Z0-9_-]*): ([\s\S]*)$/.exec(msg);
  if (coded !== null) return new GlideReplyError(`${coded[1]} ${coded[2]}`, e);
  return e;
}

/** Whether an error reply is a cluster redirection (the slot moved). */
export function isRedirect(e: unknown): boolean {
  return e instanceof Error && /^(MOVED|ASK|TRYAGAIN|CLUSTERDOWN) /.test(e.message);
}
