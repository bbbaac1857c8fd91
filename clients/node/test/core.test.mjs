// The sans-IO core (src/core/): the rules of docs/clients.md with time passed in and no
// I/O — the lease clock and its margin, the renew schedule, notices and checks, slices
// and deadlines, the unlock state machine, reply decoding, error mapping, bad input.
import { test } from "node:test";
import assert from "node:assert/strict";
import { margin, validUntil, needsReanchor, HoldLife, noticeReason, REASON_GRACE } from "../dist/esm/core/lease.js";
import { sliceFor, WaitPlan, replyAllowance, requestTimeout } from "../dist/esm/core/wait.js";
import { Release } from "../dist/esm/core/unlock.js";
import { toInt, toToken, toRecord, fromGlide } from "../dist/esm/core/replies.js";
import { mapError, isNoAnswer, fromGlideError } from "../dist/esm/core/classify.js";
import { checkOptions, ACQUIRE_OPTIONS, CLIENT_OPTIONS, checkKey, checkRenewInterval, describe } from "../dist/esm/core/options.js";
import { acquireArgs, releaseArgs } from "../dist/esm/core/commands.js";
import { quorum, renewRound, releaseRound, stillValid } from "../dist/esm/core/redlock.js";
import * as errors from "../dist/esm/errors.js";

test("lease clock: margin = min(lease/2, lease/100 + 50 ms), valid until sent + lease - margin", () => {
  assert.equal(margin(30000), 350);
  assert.equal(margin(2000), 70);
  assert.equal(margin(1000), 60);
  assert.equal(margin(60), 30); // never more than half the lease
  assert.equal(validUntil(1000, 2000), 2930);
  assert.equal(needsReanchor(0, 500, 2000), false);
  assert.equal(needsReanchor(0, 501, 2000), true);
});

test("a watchdog hold: renewed on schedule, lost 'unreachable' at valid_until, and a late ack never revives it", () => {
  const h = new HoldLife(2000, 600, 0);
  assert.equal(h.validUntil, 1930);
  assert.equal(h.renewAt, 600);
  assert.equal(h.startRenewal(599), undefined, "not due yet");
  assert.equal(h.startRenewal(600), 1930, "due: its deadline is valid_until");
  assert.equal(h.startRenewal(601), undefined, "one in flight at a time");
  assert.deepEqual(h.renewed(600, 1, 610), { kind: "none" });
  assert.equal(h.validUntil, 2530, "the clock moves to the send of the acknowledged renewal");
  assert.equal(h.renewAt, 1200);
  // The next renewal gets no answer: retried soon, never past valid_until.
  assert.equal(h.startRenewal(1200), 2530);
  assert.equal(h.renewFailed(1300), 1500);
  assert.equal(h.startRenewal(1500), 2530);
  assert.deepEqual(h.tick(2529), { kind: "none" });
  assert.deepEqual(h.tick(2530), { kind: "lost", reason: "unreachable" });
  // The renewal that was in flight answers late: the signal stays fired.
  assert.deepEqual(h.renewed(1500, 1, 2600), { kind: "none" });
  assert.equal(h.lost, true);
  assert.equal(h.reason, "unreachable");
  assert.equal(h.renewAt, Infinity);
});

test("an explicit lease: never renewed, lost 'expired' at valid_until", () => {
  const h = new HoldLife(1000, undefined, 0);
  assert.equal(h.watchdog, false);
  assert.equal(h.renewAt, Infinity);
  assert.equal(h.startRenewal(500), undefined);
  assert.deepEqual(h.tick(939), { kind: "none" });
  assert.deepEqual(h.tick(940), { kind: "lost", reason: "expired" });
});

test("a renewal answered 0, or a release NOTHELD: lost with the notice's reason, else 'not-held' after a short wait for one", () => {
  const a = new HoldLife(30000, 10000, 0);
  a.startRenewal(10000);
  // No notice yet: the one the server's act published may be on its way.
  assert.deepEqual(a.renewed(10000, 0, 10001), { kind: "wait", until: 10001 + REASON_GRACE });
  assert.equal(a.gone, true);
  assert.deepEqual(a.tick(10001 + REASON_GRACE - 1), { kind: "none" });
  assert.deepEqual(a.tick(10001 + REASON_GRACE), { kind: "lost", reason: "not-held" });
  const late = new HoldLife(30000, 10000, 0);
  late.startRenewal(10000);
  late.renewed(10000, 0, 10001);
  assert.deepEqual(late.notice("released"), { kind: "lost", reason: "forced" }, "the notice that came just after the renewal names it");
  const b = new HoldLife(30000, 10000, 0);
  assert.deepEqual(b.notice("deleted"), { kind: "check" });
  b.startRenewal(10000);
  assert.deepEqual(b.renewed(10000, 0, 10001), { kind: "lost", reason: "deleted" });
  const c = new HoldLife(30000, 10000, 0);
  c.end();
  assert.deepEqual(c.releaseGone(), { kind: "lost", reason: "not-held" });
});

test("notices: each asks for a check; the check decides; its reason comes from the notice", () => {
  assert.equal(noticeReason("released"), "forced");
  assert.equal(noticeReason("expired"), "expired");
  assert.equal(noticeReason("deleted"), "deleted");
  assert.equal(noticeReason("disconnected"), "disconnected");
  assert.equal(noticeReason("elected"), undefined);
  const h = new HoldLife(30000, 10000, 0);
  // Another holder's release (a semaphore): the check finds this hold alive.
  assert.deepEqual(h.notice("released"), { kind: "check" });
  assert.deepEqual(h.checked(true, 5), { kind: "none" });
  // A reconnect says nothing: a dead hold found then is 'not-held' (after a wait for a reason).
  assert.deepEqual(h.notice("reconnected"), { kind: "check" });
  assert.deepEqual(h.checked(false, 6), { kind: "wait", until: 6 + REASON_GRACE });
  assert.deepEqual(h.tick(6 + REASON_GRACE), { kind: "lost", reason: "not-held" });
  const f = new HoldLife(30000, 10000, 0);
  f.notice("released");
  assert.deepEqual(f.checked(false, 7), { kind: "lost", reason: "forced" });
  assert.deepEqual(f.notice("released"), { kind: "none" }, "a lost hold checks no more");
  const d = new HoldLife(30000, 10000, 0);
  assert.deepEqual(d.bindClosed(), { kind: "lost", reason: "disconnected" });
});

test("unlock: the watchdog never renews again, and a lost hold stays lost", () => {
  const h = new HoldLife(2000, 600, 0);
  h.end();
  assert.equal(h.ended, true);
  assert.equal(h.startRenewal(600), undefined);
  assert.deepEqual(h.tick(5000), { kind: "none" }, "an ended hold fires no signal");
  assert.deepEqual(h.checked(false, 10), { kind: "none" });
  assert.deepEqual(h.notice("released"), { kind: "none" });
});

test("a shorter explicit renewal moves the clock earlier and the next renewal sooner", () => {
  const h = new HoldLife(30000, 10000, 0);
  assert.deepEqual(h.acknowledged(100, 101, 3000), { kind: "none" });
  assert.equal(h.validUntil, 100 + 3000 - 80);
  assert.equal(h.renewAt, 1100);
  h.startRenewal(1100);
  h.renewed(1100, 1, 1101);
  assert.equal(h.validUntil, 1100 + 30000 - 350);
});

test("wait slices fit the transport: min(4 s, T - max(100 ms, T/5)), at least 10 ms", () => {
  assert.equal(sliceFor(undefined), 4000);
  assert.equal(sliceFor(0), 4000, "0: no limit");
  assert.equal(sliceFor(5000), 4000, "node-redis' 5 s");
  assert.equal(sliceFor(1000), 800);
  assert.equal(sliceFor(250), 150, "GLIDE's 250 ms");
  assert.equal(sliceFor(100), 10);
  assert.equal(sliceFor(60000), 4000);
  assert.equal(sliceFor(10000, 5000), 5000, "a longer default slice asked for");
  assert.equal(sliceFor(10000, 9000), 8000);
  assert.ok(sliceFor(10000) < 0.85 * 10000, "under GLIDE's slow-reply warning");
  assert.equal(replyAllowance(undefined), 1000);
  assert.equal(replyAllowance(1000), 200);
  assert.equal(requestTimeout(undefined), 5000);
  assert.equal(requestTimeout(1000), 1000);
});

test("a deadline bounds each slice, each reply and each connect; a single try has its own bound", () => {
  const p = new WaitPlan(0, 3000, undefined);
  assert.equal(p.nextWait(0), 3000);
  assert.equal(p.replyWithin(3000, 0), 3150, "never past the deadline + 150 ms");
  assert.equal(p.nextWait(2900), 100);
  assert.equal(p.connectWithin(2900), 100);
  assert.equal(p.over(3000), true);
  const long = new WaitPlan(0, 20000, 5000);
  assert.equal(long.nextWait(0), 4000);
  assert.equal(long.replyWithin(4000, 0), 5000, "the slice plus the transport's share");
  const one = new WaitPlan(0, 0, undefined);
  assert.equal(one.oneTry, true);
  assert.equal(one.nextWait(0), 0);
  assert.equal(one.replyWithin(0, 0), 5000);
  assert.equal(one.retryAfter(0), undefined, "a single try reports a connection error");
  const forever = new WaitPlan(0, undefined, undefined);
  assert.equal(forever.deadline, Infinity);
  assert.equal(forever.retryAfter(10), 50);
  assert.equal(forever.retryAfter(10), 100, "backs off");
  forever.answered();
  assert.equal(forever.retryAfter(10), 50);
  const near = new WaitPlan(0, 1000, undefined);
  assert.equal(near.retryAfter(990), 10, "never sleeps past the deadline");
  assert.equal(near.retryAfter(1000), undefined);
});

test("release: 1 released, 0 still held, NOTHELD lost, no answer retried once on a fresh connection then unknown", () => {
  assert.deepEqual(new Release(false).start(), { kind: "send", fresh: false });
  const a = new Release(false);
  a.start();
  assert.deepEqual(a.answered(1), { kind: "done", outcome: "released" });
  const b = new Release(false);
  b.start();
  assert.deepEqual(b.answered(0), { kind: "done", outcome: "still-held" });
  const c = new Release(false);
  c.start();
  assert.deepEqual(c.failed("not-held", new Error("NOTHELD")), { kind: "done", outcome: "lost" });
  const d = new Release(true);
  d.start();
  assert.deepEqual(d.answered(1), { kind: "done", outcome: "lost" }, "its signal had fired: the caller learns it");
  const e = new Release(false);
  e.start();
  const reset = new Error("ECONNRESET");
  assert.deepEqual(e.failed("connection", reset), { kind: "send", fresh: true });
  assert.deepEqual(e.answered(1), { kind: "done", outcome: "released" });
  const f = new Release(false);
  f.start();
  f.failed("connection", reset);
  const timeout = new Error("timed out");
  assert.deepEqual(f.failed("connection", timeout), { kind: "done", outcome: "unknown", error: timeout });
  const g = new Release(false);
  g.start();
  const wrong = new Error("WRONGKIND");
  assert.deepEqual(g.failed("reply", wrong), { kind: "done", outcome: "unknown", error: wrong });
});

test("replies: RESP2 and RESP3 decode the same", () => {
  assert.equal(toInt(1, "x"), 1);
  assert.equal(toInt(1n, "x"), 1);
  assert.equal(toInt("7", "x"), 7);
  assert.equal(toInt(Buffer.from("0"), "x"), 0);
  assert.equal(toInt(null, "x"), null);
  assert.throws(() => toInt("x", "DLOCK.RENEW"), /DLOCK.RENEW answered x, expected an integer/);
  assert.equal(toToken("42", "x"), 42n);
  assert.equal(toToken(null, "x"), null);
  assert.throws(() => toToken(0, "x"), /positive token/);
  const flat = toRecord(["kind", "mutex", "holders", [["owner", "a", "token", 3]]]);
  const map = toRecord(new Map([["kind", "mutex"], ["holders", [new Map([["owner", "a"], ["token", 3n]])]]]));
  assert.deepEqual(flat, map);
  assert.deepEqual(fromGlide([{ key: "a", value: 1 }]), new Map([["a", 1]]));
});

test("error replies map to the taxonomy; no answer is told from an answer", () => {
  const reply = (m) => Object.assign(new Error(m), { name: "ReplyError" });
  assert.ok(mapError(reply("NOTHELD the owner does not hold this lock")) instanceof errors.NotHeld);
  const wt = mapError(reply("WRONGTYPE Operation against a key holding the wrong kind of value"));
  assert.ok(wt instanceof errors.WrongType && wt instanceof errors.WrongKind, "WRONGTYPE is a wrong kind too");
  assert.match(wt.message, /not a dlock lock/);
  assert.ok(mapError(reply("WRONGKIND the key holds a rwlock")) instanceof errors.WrongKind);
  assert.ok(mapError(reply("QUEUEFULL x")) instanceof errors.QueueFull);
  const nr = mapError(reply("NOREPLICAS Not enough good replicas to write."));
  assert.ok(nr instanceof errors.NoReplicas && nr instanceof errors.NotDurable);
  assert.equal(nr.code, "NOREPLICAS");
  const dl = mapError(reply('DEADLOCK cycle: "a" waits for "b" on "k1", "b" waits for "a" on "k2"'));
  assert.ok(dl instanceof errors.Deadlock);
  assert.deepEqual(dl.keys.map(String), ["k1", "k2"]);
  const missing = mapError(reply("ERR unknown command 'DLOCK.ACQUIRE', with args beginning with: 'k'"));
  assert.ok(missing instanceof errors.ModuleNotLoaded && missing instanceof errors.UnknownCommand);
  assert.equal(missing.code, "UNKNOWNCOMMAND");
  assert.match(missing.message, /MODULE LOAD/);
  const other = mapError(reply("ERR unknown command 'NOSUCH'"));
  assert.ok(other instanceof errors.UnknownCommand && !(other instanceof errors.ModuleNotLoaded));
  assert.ok(mapError(reply("ERR limit mismatch")) instanceof errors.InvalidArgument);
  assert.equal(isNoAnswer(new Error("Connection is closed.")), true);
  assert.equal(isNoAnswer(new errors.ConnectionError("x")), true);
  assert.equal(isNoAnswer(reply("ERR x")), false);
  assert.equal(isNoAnswer(new errors.NotHeld()), false);
  class RequestError extends Error {}
  assert.equal(fromGlideError(new RequestError("NOTHELD: the owner")).message, "NOTHELD the owner");
  assert.equal(
    fromGlideError(new RequestError("An error was signalled by the server: - ResponseError: unknown command 'DLOCK.X'")).message,
    "ERR unknown command 'DLOCK.X'",
  );
});

test("bad input names the argument and what was expected", () => {
  const refused = (fn, argument, message) => {
    try {
      fn();
    } catch (e) {
      assert.ok(e instanceof errors.InvalidArgument, String(e));
      assert.equal(e.argument, argument);
      assert.match(e.message, message);
      return;
    }
    assert.fail(`not refused: ${argument}`);
  };
  refused(() => checkOptions("acquire()", { lease: "1000" }, ACQUIRE_OPTIONS), "lease", /lease must be a number of milliseconds from 1 to 2\^40, got the string "1000"/);
  refused(() => checkOptions("acquire()", { lease: 2 ** 41 }, ACQUIRE_OPTIONS), "lease", /got 2199023255552/);
  refused(() => checkOptions("acquire()", { acquireTimeout: 5 }, ACQUIRE_OPTIONS), "acquireTimeout", /redis-semaphore option; here it is "timeout"/);
  refused(() => checkOptions("acquire()", { retryCount: 5 }, ACQUIRE_OPTIONS), "retryCount", /node-redlock option; here it is "timeout"/);
  refused(() => checkOptions("new Dlock()", { driftFactor: 0.01 }, CLIENT_OPTIONS), "driftFactor", /margin is fixed/);
  refused(() => checkOptions("acquire()", { Timeout: 5 }, ACQUIRE_OPTIONS), "Timeout", /did you mean "timeout"/);
  refused(() => checkOptions("acquire()", { bind: "yes" }, ACQUIRE_OPTIONS), "bind", /true or false, got the string "yes"/);
  refused(() => checkOptions("acquire()", 5, ACQUIRE_OPTIONS), "options", /must be an object, got 5/);
  refused(() => checkKey("dlock.lock()", ""), "key", /non-empty string, got the string ""/);
  refused(() => checkRenewInterval("new Dlock()", 2000, 2000), "renewInterval", /shorter than watchdogLease \(2000 ms\)/);
  checkOptions("acquire()", { timeout: Infinity, lease: undefined }, ACQUIRE_OPTIONS);
  assert.equal(describe(NaN), "NaN");
  assert.equal(describe(1n), "the bigint 1n");
});

test("commands are built in one place", () => {
  assert.deepEqual(
    acquireArgs({ kind: "semaphore", key: "s", owner: "o", lease: 100, wait: 5, limit: 3, permits: 2, bind: true, lockDelay: 10 }),
    ["DLOCK.SEMACQUIRE", "s", "o", "LIMIT", 3, "PERMITS", 2, "PX", 100, "WAIT", 5, "BIND", "LOCKDELAY", 10],
  );
  assert.deepEqual(acquireArgs({ kind: "read", key: "k", owner: "o", lease: 1, wait: 0 }), ["DLOCK.RWACQUIRE", "k", "o", "READ", "PX", 1, "WAIT", 0]);
  assert.deepEqual(releaseArgs("write", "k", "o"), ["DLOCK.RELEASE", "k", "o", "WRITE"]);
  assert.deepEqual(releaseArgs("semaphore", "k", "o", 2), ["DLOCK.RELEASE", "k", "o", "PERMITS", 2]);
});

test("RedLock: quorum, validity and rounds", () => {
  assert.equal(quorum(3), 2);
  assert.equal(quorum(4), 3);
  assert.equal(stillValid(0, 900, 1000), true);
  assert.equal(stillValid(0, 940, 1000), false);
  assert.equal(renewRound([1, 1, "none"], 3), "renewed");
  assert.equal(renewRound([0, "gone", 1], 3), "lost");
  assert.equal(renewRound([1, "none", "none"], 3), "unknown");
  assert.equal(releaseRound([1, 1, "none"], 3), "released");
  assert.equal(releaseRound([1, "gone", "none"], 3), "lost");
  assert.equal(releaseRound(["none", "none", 1], 3), "unknown");
});
