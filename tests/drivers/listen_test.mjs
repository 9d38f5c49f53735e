#!/usr/bin/env node
// postgres.js sql.listen() (issue 15 item 1): LISTENERS (20) postgres() instances
// each keep a connection that LISTENs (postgres.js opens one per instance for
// listen()); a sender NOTIFYs; every listener must get every notification
// exactly once, in order, while idle, and ordinary queries on the same
// pooler must not wait behind the listeners. Through hyperpool's pool of 2
// (drivers_test.sh) that needs LISTEN without pinning: pinned, the listeners
// would exceed max_pinned and fail with 53300. Also: unlisten() stops
// delivery, and a LISTEN in a rolled-back transaction does not subscribe.
// The same program runs direct and through hyperpool.
//
// usage: node listen_test.mjs URL
import postgres from 'postgres';
import { Report, within } from './drvcommon.mjs';

const DRIVER = 'postgresjs_listen';
const CHANNEL = 'drv_js_listen';
const MARKER = 'drv_js_listen_marker';
const LISTENERS = 20;  // the number: 20 listeners, a 21st sends, on a pool of 2
const NOTIFIES = 5;
const WAIT_MS = 15000;

const url = process.argv[2];
const rep = new Report(DRIVER);
const opts = { connect_timeout: 10, onnotice: () => {} };

class Rollback extends Error {}

// A promise resolved once pred() holds, checked whenever poke() is called.
function waiter() {
  const waits = [];
  return {
    until(pred) {
      if (pred()) return Promise.resolve(true);
      return new Promise((resolve) => waits.push({ pred, resolve }));
    },
    poke() {
      for (let i = waits.length - 1; i >= 0; i--) {
        if (waits[i].pred()) { waits[i].resolve(true); waits.splice(i, 1); }
      }
    },
  };
}

const instances = [];
function make(extra = {}) {
  const sql = postgres(url, { ...opts, ...extra });
  instances.push(sql);
  return sql;
}

async function main() {
  const w = waiter();
  const got = Array.from({ length: LISTENERS }, () => []);
  const markers = Array.from({ length: LISTENERS }, () => []);
  const handles = [];
  for (let i = 0; i < LISTENERS; i++) {
    const sql = make({ max: 1 });
    handles.push(await sql.listen(CHANNEL, (x) => { got[i].push(x); w.poke(); }));
    await sql.listen(MARKER, (x) => { markers[i].push(x); w.poke(); });
  }
  rep.check(true, `${LISTENERS} postgres.js instances listen on ${CHANNEL} and ${MARKER}`);

  // Ordinary work beside the listeners, bounded.
  const work = make({ max: 4 });
  const t0 = Date.now();
  const ones = await within(Promise.all(Array.from({ length: 40 }, (_, k) => work`select ${k}::int as k`)), WAIT_MS);
  rep.check(ones !== 'timeout' && ones.every((r, k) => r[0].k === k), '40 ordinary queries beside the listeners',
    `${ones === 'timeout' ? 'timeout' : 'done'} in ${Date.now() - t0} ms`);

  const sender = make({ max: 1 });
  for (let k = 0; k < NOTIFIES; k++) await sender.notify(CHANNEL, `m${k}`);
  await sender.notify(CHANNEL, 'end');
  const want = [...Array.from({ length: NOTIFIES }, (_, k) => `m${k}`), 'end'];
  const all = await within(w.until(() => got.every((g) => g.length >= want.length)), WAIT_MS);
  const exact = got.every((g) => JSON.stringify(g) === JSON.stringify(want));
  rep.check(all !== 'timeout' && exact, `every listener got each of ${want.length} notifications once, in order`,
    got.map((g, i) => `#${i}: ${g.join(',')}`).join('; '));

  // unlisten() on listener 0: the next CHANNEL notification must not reach it;
  // a MARKER notification after it shows it would have by then.
  await handles[0].unlisten();
  await sender.notify(CHANNEL, 'after-unlisten');
  await sender.notify(MARKER, 'fence');
  const fenced = await within(w.until(() => markers.every((m) => m.includes('fence')) &&
    got.slice(1).every((g) => g.includes('after-unlisten'))), WAIT_MS);
  rep.check(fenced !== 'timeout' && !got[0].includes('after-unlisten') &&
    got.slice(1).every((g) => g.filter((x) => x === 'after-unlisten').length === 1),
  'unlisten() stops delivery to that listener only', `listener 0 got: ${got[0].join(',')}`);

  // LISTEN inside a transaction that rolls back does not subscribe.
  const heard = [];
  const rb = make({ max: 1, onnotify: (ch, x) => { heard.push(`${ch}:${x}`); w.poke(); } });
  try {
    await rb.begin(async (tx) => {
      await tx`listen drv_js_rolled_back`;
      throw new Rollback();
    });
  } catch (e) {
    if (!(e instanceof Rollback)) throw e;
  }
  // Simple-protocol LISTEN on the same instance (a regular connection, not
  // listen()'s): its notifications come through onnotify.
  await rb.unsafe('listen drv_js_rb_marker');
  await sender.notify('drv_js_rolled_back', 'no');
  await sender.notify('drv_js_rb_marker', 'fence');
  const rbDone = await within(w.until(() => heard.length > 0), WAIT_MS);
  rep.check(rbDone !== 'timeout' && JSON.stringify(heard) === JSON.stringify(['drv_js_rb_marker:fence']),
    'LISTEN in a rolled-back transaction does not subscribe', `heard: ${heard.join(',')}`);
}

try {
  await main();
} catch (e) {
  rep.error('listen test', e);
} finally {
  await Promise.all(instances.map((s) => s.end({ timeout: 5 }).catch(() => {})));
}
rep.finish();
