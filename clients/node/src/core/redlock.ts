// The RedLock arithmetic: the quorum, whether a round's grants still leave a valid
// lease, and what a round of renewals or releases means. No I/O.
import { margin } from "./lease.js";

/** A majority of `n` servers. */
export function quorum(n: number): number {
  return Math.floor(n / 2) + 1;
}

/** Whether grants from a round sent at `start` and ended at `now` still leave some of `lease`. */
export function stillValid(start: number, now: number, lease: number): boolean {
  return now - start < lease - margin(lease);
}

/** Each server's answer to one command: its integer reply, `"gone"` (`NOTHELD`), or `"none"` (an error, no answer). */
export type Answer = number | "gone" | "none";

/** What a round of renewals says: renewed by a majority, gone from a majority, or not known. */
export function renewRound(answers: Answer[], n: number): "renewed" | "lost" | "unknown" {
  const q = quorum(n);
  if (answers.filter((a) => a === 1).length >= q) return "renewed";
  if (answers.filter((a) => a === 0 || a === "gone").length > n - q) return "lost";
  return "unknown";
}

/** What a round of releases says: released by a majority, already gone from a majority, or not known. */
export function releaseRound(answers: Answer[], n: number): "released" | "lost" | "unknown" {
  const q = quorum(n);
  const released = answers.filter((a) => a === 1).length;
  if (released >= q) return "released";
  if (released + answers.filter((a) => a === "gone").length >= q) return "lost";
  return "unknown";
}
