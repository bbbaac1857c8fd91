// `await using`: compiled by tsc (Node 20 does not parse the syntax itself).
import { test } from "node:test";
import assert from "node:assert/strict";
import { Dlock } from "dlock-redis";
// @ts-expect-error: a JavaScript module without types
import { FLAVOURS, startServer } from "../../test/setup.mjs";

for (const flavour of FLAVOURS as Array<{ name: string; make: (t: unknown, port: number) => Promise<unknown> }>) {
  test(`await using releases, also when the block throws (${flavour.name})`, async (t) => {
    const server = await startServer(t);
    const d = new Dlock(await flavour.make(t, server.port));
    t.after(() => d.close());
    {
      await using hold = await d.lock("u").acquire();
      assert.equal(typeof hold.token, "bigint");
      assert.notEqual(await d.info("u"), null);
    }
    assert.equal(await d.info("u"), null);
    await assert.rejects(
      (async () => {
        await using _hold = await d.lock("u").acquire();
        throw new Error("boom");
      })(),
      /boom/,
    );
    assert.equal(await d.info("u"), null, "released although the block threw");
    // An explicit release inside the block: leaving it does not release twice.
    {
      await using hold = await d.lock("u").acquire();
      assert.equal(await hold.release(), "released");
    }
    assert.equal(await d.info("u"), null);
  });
}
