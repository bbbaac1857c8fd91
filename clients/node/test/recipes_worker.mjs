// A process for the recipe tests (recipes.test.mjs): prints JSON lines on stdout.
//
//   node recipes_worker.mjs runonce PORT NAME FIRST_SLOT SLOTS PERIOD_MS AT_LEAST_MS AT_MOST_MS
//   node recipes_worker.mjs elect PORT NAME ID BIND LEASE_MS LOCKDELAY_MS
//
// `runonce` runs runOnce(NAME) at every PERIOD boundary of the wall clock for slots
// FIRST_SLOT .. FIRST_SLOT+SLOTS-1; the job counts itself in (fenced INCR/DECR of
// NAME:running) and logs `slot:pid:token:running` to NAME:log.
// `elect` campaigns forever as owner `w<ID>`; once elected it proclaims `addr-<ID>` and
// appends `<ID>:<token>` to NAME:log with DLOCK.FENCED every 50 ms; a line `resign` on
// stdin makes it resign and campaign again.
import { createInterface } from "node:readline";
import Redis from "ioredis";
import { Dlock, Election, Fenced, runOnce } from "dlock-redis";

const wall = () => performance.timeOrigin + performance.now();
const sleep = (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms)));
const emit = (o) => process.stdout.write(JSON.stringify({ t: wall(), ...o }) + "\n");

async function runonce(port, name, first, slots, period, atLeast, atMost) {
  const r = new Redis({ host: "127.0.0.1", port, maxRetriesPerRequest: 1 });
  const d = new Dlock(r);
  const counts = { ran: 0, skipped: 0, lost: 0 };
  let lateMax = 0;
  for (let slot = first; slot < first + slots; slot++) {
    const due = slot * period;
    await sleep(due - wall());
    lateMax = Math.max(lateMax, wall() - due);
    const res = await runOnce(d, name, { atMostFor: atMost, atLeastFor: atLeast }, async (_signal, hold) => {
      const running = Number(await hold.fenced("INCR", `${name}:running`));
      await sleep(20);
      await hold.fenced("DECR", `${name}:running`);
      await hold.fenced("RPUSH", `${name}:log`, `${slot}:${process.pid}:${hold.token}:${running}`);
      return running;
    });
    counts[res.outcome] += 1;
    if (res.outcome === "lost") emit({ ev: "lost", slot, reason: res.reason });
  }
  emit({ ev: "done", late_max: lateMax, ...counts });
  d.close();
  r.disconnect();
}

async function elect(port, name, id, bind, lease, lockDelay) {
  const r = new Redis({ host: "127.0.0.1", port, maxRetriesPerRequest: 1 });
  r.on("error", () => {});
  const d = new Dlock(r);
  const e = new Election(d, name, { owner: `w${id}`, lease, bind, lockDelay: lockDelay || undefined });
  let resign = false;
  createInterface({ input: process.stdin }).on("line", (line) => {
    if (line.trim() === "resign") resign = true;
  });
  emit({ ev: "ready", id });
  for (;;) {
    const term = await e.campaign();
    emit({ ev: "elected", id, token: String(term.token) });
    try {
      await term.proclaim(`addr-${id}`);
    } catch (err) {
      if (!(err instanceof Fenced)) throw err;
    }
    for (;;) {
      if (term.lost) {
        // When the term counted as over, on this process' clock (its lease clock's end).
        const lostAt = wall() - (performance.now() - term.hold._state.life.validUntil);
        const reason = term.signal.reason?.reason;
        emit({ ev: "lost", id, token: String(term.token), reason, lost_at: lostAt });
        break;
      }
      if (resign) {
        resign = false;
        emit({ ev: "resigning", id, token: String(term.token) });
        const outcome = await term.resign();
        emit({ ev: "resigned", id, token: String(term.token), outcome });
        break;
      }
      try {
        await term.fenced("RPUSH", `${name}:log`, `${id}:${term.token}`);
      } catch (err) {
        if (!(err instanceof Fenced)) throw err;
        emit({ ev: "refused", id, token: String(term.token) });
      }
      await sleep(50);
    }
  }
}

const [mode, port, name, ...a] = process.argv.slice(2);
if (mode === "runonce") {
  await runonce(Number(port), name, ...a.map(Number));
} else {
  await elect(Number(port), name, Number(a[0]), a[1] === "1", Number(a[2]), Number(a[3]));
}
