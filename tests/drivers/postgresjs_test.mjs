#!/usr/bin/env node
// postgres.js (`postgres`) against a PostgreSQL URL, with its default prepare: true
// (every tagged-template query becomes a named server-side statement).
//
// usage: node postgresjs_test.mjs URL   (postgresql://USER:PASS@HOST:PORT/DB?sslmode=disable)
// POSTGRESJS_MODULE names the package to test: `postgres` (3.4, default) or
// `postgres4` (4.x, an npm alias in package.json); both export postgres() as default.
//
// 8 workers, each its own postgres() instance with max: 1, so each worker is
// one connection (see README.md for the workload and checks).
const { default: postgres } = await import(process.env.POSTGRESJS_MODULE || 'postgres');
import {
  ACCOUNTS, CANCEL_AFTER_MS, CANCEL_LIMIT_MS, DEADLINE_MS, ITERATIONS, REF_ROWS, START_BALANCE,
  WORKERS, ZONES, Report, WorkerStats, opsOrder, probe, setupSql, sleep, tables, within,
} from './drvcommon.mjs';

const DRIVER = process.env.POSTGRESJS_MODULE === 'postgres4' ? 'postgresjs4' : 'postgresjs';
const [ACC, REF] = tables(DRIVER);

class Rollback extends Error {}

function connect(url, closes) {
  return postgres(url, {
    max: 1,
    prepare: true, // the default, stated
    connect_timeout: 10,
    onnotice: () => {},
    onclose: () => { if (closes) closes.n++; },
  });
}

// postgres.js's cancel API: query.cancel() on a pending query (a CancelRequest on a
// new connection to the same host and port).
async function cancelCheck(sql, closes, rep, label = '') {
  rep.cancelDone = true;
  const q = sql`SELECT pg_sleep(30)`;
  const settled = q.then(() => ({ outcome: 'completed', t: Date.now() }),
    (e) => ({ outcome: 'error', err: e, t: Date.now() }));
  await sleep(CANCEL_AFTER_MS);
  const closesBefore = closes.n;
  const t0 = Date.now();
  q.cancel();
  const r = await within(settled, 35000);
  const tEnd = (r === 'timeout' ? Date.now() : r.t) - t0;
  const code = r.err ? r.err.code : undefined;
  let val;
  try {
    val = await within(sql`SELECT 1 AS one`.then((rows) => rows[0].one), 35000);
  } catch (e) {
    val = `${e.code || ''} ${e.message}`;
  }
  const tOne = Date.now() - t0;
  const reconnected = closes.n !== closesBefore;
  rep.check(code === '57014' && tEnd >= 0 && tEnd <= CANCEL_LIMIT_MS && val === 1 && tOne <= CANCEL_LIMIT_MS && !reconnected,
    'cancel pg_sleep(30) via query.cancel()' + label,
    `${r === 'timeout' ? 'timeout' : r.outcome} SQLSTATE ${code} ${tEnd < 0 ? 'BEFORE the cancel was sent' : (tEnd / 1000).toFixed(3) + 's after the cancel'} ` +
    `(${r.err ? r.err.message : ''}); SELECT 1 -> ${JSON.stringify(val)} ${(tOne / 1000).toFixed(3)}s after the ` +
    `cancel on ${reconnected ? 'a NEW connection (the old one closed)' : 'the same connection'}`);
}

async function worker(w, url, rep, stats, balances) {
  const zone = ZONES[w];
  const a = 2 * w + 1;
  const b = 2 * w + 2;
  const bal = { [a]: START_BALANCE, [b]: START_BALANCE };
  const closes = { n: 0 };
  const sql = connect(url, closes);
  const acc = sql(ACC);
  const ref = sql(REF);
  try {
    await sql.unsafe(`SET TimeZone = '${zone}'`);
    const showTz = async (s = sql) => (await s`SHOW TimeZone`)[0].TimeZone;
    stats.tz('after SET', await showTz(), zone);
    const [pkey, mult] = probe(w);
    for (let i = 0; i < ITERATIONS; i++) {
      for (const op of opsOrder(w)) {
        if (op === 'ref') {
          const k = (w * 7 + i) % REF_ROWS + 1;
          const got = (await sql`SELECT v FROM ${ref} WHERE k = ${k}`)[0].v;
          stats.reads++;
          if (got !== `v${k}`) stats.badRead(`ref ${k}`, got, `v${k}`);
        } else if (op === 'balance') {
          const acct = i % 2 ? a : b;
          const got = Number((await sql`SELECT balance FROM ${acc} WHERE id = ${acct}`)[0].balance);
          stats.reads++;
          if (got !== bal[acct]) stats.badRead(`balance ${acct}`, got, bal[acct]);
        } else if (op === 'probe') {
          const x = i + w;
          const got = mult === 2 ? (await sql`SELECT ${x}::int * 2 AS v`)[0].v
            : (await sql`SELECT ${x}::int * 3 AS v`)[0].v;
          stats.reads++;
          if (got !== x * mult) stats.badRead(`${pkey}(${x})`, got, x * mult);
        } else if (op === 'pair') {
          const got = Number((await sql`SELECT sum(balance)::bigint AS s FROM ${acc} WHERE id IN (${a}, ${b})`)[0].s);
          stats.reads++;
          if (got !== bal[a] + bal[b]) stats.badRead('pair sum', got, bal[a] + bal[b]);
        } else if (op === 'transfer') {
          const amt = i % 5 + 1;
          const [src, dst] = i % 2 === 0 ? [a, b] : [b, a];
          const rollback = i % 10 === 9;
          try {
            await sql.begin(async (tx) => {
              await tx`UPDATE ${acc} SET balance = balance + ${amt} WHERE id = ${dst}`;
              await tx`UPDATE ${acc} SET balance = balance - ${amt} WHERE id = ${src}`;
              const got = Number((await tx`SELECT balance FROM ${acc} WHERE id = ${dst}`)[0].balance);
              stats.reads++;
              if (got !== bal[dst] + amt) stats.badRead(`in-transaction balance ${dst}`, got, bal[dst] + amt);
              if (i % 4 === 0) stats.tz('inside a transaction', await showTz(tx), zone);
              if (rollback) throw new Rollback();
            });
          } catch (e) {
            if (!(e instanceof Rollback)) throw e;
          }
          if (rollback) {
            stats.rollbacks++;
          } else {
            stats.commits++;
            bal[dst] += amt;
            bal[src] -= amt;
          }
        }
      }
      if (i % 6 === 0) stats.tz(`iteration ${i}`, await showTz(), zone);
      if (w === 0 && i === Math.floor(ITERATIONS / 2)) await cancelCheck(sql, closes, rep);
      stats.done++;
    }
    stats.tz('at the end', await showTz(), zone);
    if (closes.n !== 0) rep.error(`worker ${w}`, new Error(`its connection closed ${closes.n} time(s) mid-run`));
  } finally {
    Object.assign(balances, bal);
    await within(sql.end({ timeout: 5 }), 6000);
  }
}

async function main(url) {
  const rep = new Report(DRIVER);
  try {
    const sql = connect(url);
    for (const s of setupSql(DRIVER)) await sql.unsafe(s);
    await sql.end({ timeout: 5 });
    rep.check(true, 'setup', `${ACC} with ${ACCOUNTS} accounts`);
  } catch (e) {
    rep.error('setup', e);
    rep.finish();
  }

  const stats = Array.from({ length: WORKERS }, (_, w) => new WorkerStats(w));
  const balances = {};
  const all = Promise.all(stats.map((s, w) => worker(w, url, rep, s, balances)
    .catch((e) => rep.error(`worker ${w} iteration ${s.done}`, e))));
  if (await within(all, DEADLINE_MS) === 'timeout') {
    rep.error('workers', new Error(`did not finish within ${DEADLINE_MS / 1000}s`));
  }
  stats.forEach((s, w) => s.report(rep, ZONES[w]));
  if (!rep.cancelDone) {
    // Worker 0 stopped before its mid-run cancel: still say whether cancel works.
    const closes = { n: 0 };
    const sql = connect(url, closes);
    try {
      await cancelCheck(sql, closes, rep, ' (own connection: worker 0 stopped early)');
    } catch (e) {
      rep.error('cancel check', e);
    }
    await within(sql.end({ timeout: 5 }), 6000);
  }

  try {
    const sql = connect(url);
    const rows = await sql`SELECT id, balance FROM ${sql(ACC)} ORDER BY id`;
    const total = Number((await sql`SELECT sum(balance)::bigint AS s FROM ${sql(ACC)}`)[0].s);
    await sql.end({ timeout: 5 });
    const got = Object.fromEntries(rows.map((r) => [r.id, Number(r.balance)]));
    const wrong = Object.entries(balances).filter(([k, v]) => got[k] !== v).map(([k, v]) => `${k}: ${got[k]} != ${v}`);
    rep.check(wrong.length === 0 && Object.keys(balances).length === ACCOUNTS,
      'final balances match committed transfers', wrong.slice(0, 5).join('; ') || `${ACCOUNTS} accounts`);
    rep.check(total === ACCOUNTS * START_BALANCE, 'sum invariant', `sum ${total}, want ${ACCOUNTS * START_BALANCE}`);
  } catch (e) {
    rep.error('final check', e);
  }
  rep.finish();
}

if (process.argv.length !== 3) {
  console.error('usage: node postgresjs_test.mjs URL');
  process.exit(2);
}
main(process.argv[2]);
