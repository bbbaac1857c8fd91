// Unlock ends ownership, whatever happens (docs/clients.md, rule 3): the meaning of a
// RELEASE's answer, one retry on a fresh connection after a connection failure, and the
// result. No I/O: the driver sends what `next` asks and feeds the outcome back.

/** What `release()` found. */
export type ReleaseOutcome =
  /** The server ended the hold (`1`). */
  | "released"
  /** A reentrant count remains (`0`): the hold stays, and stays renewed. */
  | "still-held"
  /** The hold had already ended (`NOTHELD`, or its loss signal had fired): someone else may have had the lock. */
  | "lost"
  /** No answer, also on a fresh connection: the hold ends at its lease at the latest, and is not renewed. */
  | "unknown";

/** Where to send the RELEASE: the usual connection first, a fresh one for the retry. */
export type ReleaseStep =
  | { readonly kind: "send"; readonly fresh: boolean }
  | { readonly kind: "done"; readonly outcome: ReleaseOutcome; readonly error?: unknown };

/** How the driver classes a failed RELEASE call. */
export type ReleaseFailure =
  /** The server answered `NOTHELD`. */
  | "not-held"
  /** The server answered another error (the hold's state is not known). */
  | "reply"
  /** No answer: the connection failed or the call timed out. */
  | "connection";

export class Release {
  private tries = 0;
  private done: ReleaseStep | undefined;

  constructor(
    /** Whether the hold's loss signal had fired before the release: its result is `lost` whatever the server says. */
    private readonly wasLost: boolean,
  ) {}

  /** The first step. */
  start(): ReleaseStep {
    return this.send();
  }

  private send(): ReleaseStep {
    this.tries += 1;
    return { kind: "send", fresh: this.tries > 1 };
  }

  private finish(outcome: ReleaseOutcome, error?: unknown): ReleaseStep {
    this.done = error === undefined ? { kind: "done", outcome } : { kind: "done", outcome, error };
    return this.done;
  }

  /** The server's integer answer (`1` released, `0` still held). */
  answered(answer: number | null): ReleaseStep {
    if (this.done !== undefined) return this.done;
    if (answer === 1) return this.finish(this.wasLost ? "lost" : "released");
    if (answer === 0) return this.finish(this.wasLost ? "lost" : "still-held");
    return this.finish("unknown", new Error(`DLOCK.RELEASE answered ${String(answer)}, expected 1 or 0`));
  }

  /** The call failed: `NOTHELD`, another error reply, or no answer (retried once on a fresh connection). */
  failed(failure: ReleaseFailure, error: unknown): ReleaseStep {
    if (this.done !== undefined) return this.done;
    if (failure === "not-held") return this.finish("lost");
    if (failure === "connection" && this.tries < 2) return this.send();
    return this.finish("unknown", error);
  }
}
