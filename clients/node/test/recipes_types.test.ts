// The recipes from TypeScript (compiled by tsc, so the types are checked): `await using`
// resigns a term, `for await` over an observer, runOnce's typed result.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Dlock, Election, runOnce, type Leader, type RunResult } from "dlock-redis";
// @ts-expect-error: a JavaScript module without types
import { FLAVOURS, startServer } from "../../test/setup.mjs";

const [, IOREDIS] = FLAVOURS as Array<{ name: string; make: (t: unknown, port: number) => Promise<unknown> }>;

test("recipes from TypeScript: await using a term, for await over leaders, runOnce", async (t) => {
  const server = await startServer(t);
  const d = new Dlock(await IOREDIS!.make(t, server.port));
  const e = new Election(d, "ts-leader", { owner: "me" });
  t.after(() => {
    e.close();
    d.close();
  });
  const obs = e.observe();
  assert.equal((await obs.next()).value, null);
  const seen: Array<Leader | null> = [];
  const watching = (async () => {
    for await (const leader of obs) {
      seen.push(leader);
      if (leader === null) break; // resigned
    }
  })();
  {
    await using term = await e.campaign();
    assert.equal(typeof term.token, "bigint");
    await term.proclaim("10.0.0.7:80");
    const leader = await e.leader();
    assert.equal(leader?.value, "10.0.0.7:80");
    while (!seen.some((l) => l?.value === "10.0.0.7:80")) await new Promise((r) => setTimeout(r, 5));
  }
  await watching;
  // Resigning deletes the value, then releases: an observer woken in between also sees the
  // leader without its value (["me", null]) before nobody (null).
  const shown = seen.map((l) => l && [l.owner, l.value]);
  assert.deepEqual(shown.at(-1), null);
  assert.ok(shown.some((l) => l !== null && l[0] === "me" && l[1] === "10.0.0.7:80"), JSON.stringify(shown));
  assert.ok(shown.slice(0, -1).every((l) => l !== null && l[0] === "me"), JSON.stringify(shown));
  const r: RunResult<number> = await runOnce(d, "ts-job", { atMostFor: 1000 }, (_signal, hold) => Number(hold.token > 0n));
  assert.equal(r.outcome, "ran");
  assert.equal(r.value, 1);
});
