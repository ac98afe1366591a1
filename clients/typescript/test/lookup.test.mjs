// The schedule of a waiting call's look-ups of its stored result, on an
// injected clock (seconds into the wait): after 5 s, then 10, 20, 40, at
// most 60 s apart; after a reconnect or a dropped message at the next
// check, backing off again from there.
import { test } from "node:test";
import assert from "node:assert/strict";
import { LookupSchedule } from "../dist/lookup.js";

const t0 = 1_000_000_000;
const at = (s) => t0 + s * 1000;

for (const [name, checks] of [
  ["backs off to a minute", [
    { at: 5, due: true }, { at: 10 }, { at: 15, due: true }, { at: 30 }, { at: 35, due: true },
    { at: 70 }, { at: 75, due: true }, { at: 130 }, { at: 135, due: true }, { at: 190 }, { at: 195, due: true },
  ]],
  ["a reconnect looks at once", [
    { at: 5, due: true }, { at: 10, reconnects: 1, due: true }, { at: 15, reconnects: 1 },
    { at: 20, reconnects: 1, due: true }, { at: 25, reconnects: 1 },
  ]],
  ["a reconnect during the backoff starts it again", [
    { at: 5, due: true }, { at: 15, due: true }, { at: 35, due: true }, { at: 40, reconnects: 2, due: true },
    { at: 45, reconnects: 2 }, { at: 50, reconnects: 2, due: true }, { at: 65, reconnects: 2 }, { at: 70, reconnects: 2, due: true },
  ]],
  ["a dropped message looks at once", [
    { at: 5, due: true }, { at: 10 }, { at: 12, dropped: 3, due: true }, { at: 17, dropped: 3 },
    { at: 22, dropped: 3, due: true }, { at: 27, dropped: 4, due: true },
  ]],
]) {
  test(`look-up schedule: ${name}`, () => {
    const s = new LookupSchedule(t0, 0, 0);
    for (const c of checks) {
      const got = s.due(at(c.at), c.reconnects ?? 0, c.dropped ?? 0);
      assert.equal(got, c.due ?? false, `at ${c.at}s (reconnects ${c.reconnects ?? 0}, dropped ${c.dropped ?? 0})`);
    }
  });
}

test("look-up schedule: reconnects before the wait began do not count", () => {
  const s = new LookupSchedule(t0, 7, 2);
  assert.equal(s.due(at(1), 7, 2), false);
  assert.equal(s.due(at(5), 7, 2), true);
});
