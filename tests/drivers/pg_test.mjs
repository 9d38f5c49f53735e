#!/usr/bin/env node
// node-postgres (`pg`) against a PostgreSQL URL, using named queries
// ({name, text, values}: Parse once per connection under the app's own name,
// then Bind/Execute by name).
//
// usage: node pg_test.mjs URL   (postgresql://USER:PASS@HOST:PORT/DB?sslmode=disable)
//
// 8 workers, each its own pg.Client (see README.md for the workload and checks).
// Worker parity picks the text of the statement named "probe": the same name
// means different statements on different connections, as it may.
import pg from 'pg';
import {
  ACCOUNTS, CANCEL_AFTER_MS, CANCEL_LIMIT_MS, DEADLINE_MS, ITERATIONS, REF_ROWS, START_BALANCE,
  WORKERS, ZONES, Report, WorkerStats, opsOrder, probe, setupSql, sleep, statements, tables, within,
} from './drvcommon.mjs';

const DRIVER = 'pg';

async function one(client, name, text, values) {
  const res = await client.query({ name, text, values });
  return res.rows.length ? Object.values(res.rows[0])[0] : undefined;
}

// node-postgres has no documented cancel API. It does have Client#cancel(client,
// query) (lib/client.js, used by pg's own tests): called on a second, unconnected
// pg.Client with the same settings, it opens a connection to the same host and port
// and sends a CancelRequest with the first client's backend key, if `query` is that
// client's active query. The query must be a submittable pg.Query object.
async function cancelCheck(client, url, rep, label = '') {
  rep.cancelDone = true;
  process.noDeprecation = true; // Client#cancel reads the deprecated client.activeQuery
  const q = new pg.Query({ text: 'SELECT pg_sleep(30)' });
  const settled = new Promise((resolve) => {
    q.on('error', (e) => resolve({ outcome: 'error', err: e, t: Date.now() }));
    q.on('end', () => resolve({ outcome: 'completed', t: Date.now() }));
  });
  client.query(q);
  await sleep(CANCEL_AFTER_MS);
  const t0 = Date.now();
  new pg.Client({ connectionString: url }).cancel(client, q);
  const r = await within(settled, 35000);
  const tEnd = (r === 'timeout' ? Date.now() : r.t) - t0;
  const code = r.err ? r.err.code : undefined;
  let val;
  try {
    val = await within(one(client, undefined, 'SELECT 1 AS one'), 35000);
  } catch (e) {
    val = `${e.code || ''} ${e.message}`;
  }
  const tOne = Date.now() - t0;
  rep.check(code === '57014' && tEnd >= 0 && tEnd <= CANCEL_LIMIT_MS && val === 1 && tOne <= CANCEL_LIMIT_MS,
    'cancel pg_sleep(30) via Client#cancel' + label,
    `${r === 'timeout' ? 'timeout' : r.outcome} SQLSTATE ${code} ${tEnd < 0 ? 'BEFORE the cancel was sent' : (tEnd / 1000).toFixed(3) + 's after the cancel'} ` +
    `(${r.err ? r.err.message : ''}); SELECT 1 on the same connection -> ${JSON.stringify(val)} ` +
    `${(tOne / 1000).toFixed(3)}s after the cancel`);
}

async function worker(w, url, rep, S, stats, balances) {
  const zone = ZONES[w];
  const a = 2 * w + 1;
  const b = 2 * w + 2;
  const bal = { [a]: START_BALANCE, [b]: START_BALANCE };
  const client = new pg.Client({ connectionString: url });
  client.on('error', (e) => rep.error(`worker ${w} connection`, e));
  await client.connect();
  try {
    await client.query(`SET TimeZone = '${zone}'`);
    const showTz = () => one(client, 'show_tz', 'SHOW TimeZone');
    stats.tz('after SET', await showTz(), zone);
    const [pkey, mult] = probe(w);
    for (let i = 0; i < ITERATIONS; i++) {
      for (const op of opsOrder(w)) {
        if (op === 'ref') {
          const k = (w * 7 + i) % REF_ROWS + 1;
          const got = await one(client, 'ref', S.ref, [k]);
          stats.reads++;
          if (got !== `v${k}`) stats.badRead(`ref ${k}`, got, `v${k}`);
        } else if (op === 'balance') {
          const acct = i % 2 ? a : b;
          const got = Number(await one(client, 'balance', S.balance, [acct]));
          stats.reads++;
          if (got !== bal[acct]) stats.badRead(`balance ${acct}`, got, bal[acct]);
        } else if (op === 'probe') {
          const x = i + w;
          const got = await one(client, 'probe', S[pkey], [x]);
          stats.reads++;
          if (got !== x * mult) stats.badRead(`${pkey}(${x})`, got, x * mult);
        } else if (op === 'pair') {
          const got = Number(await one(client, 'pair', S.pair, [a, b]));
          stats.reads++;
          if (got !== bal[a] + bal[b]) stats.badRead('pair sum', got, bal[a] + bal[b]);
        } else if (op === 'transfer') {
          const amt = i % 5 + 1;
          const [src, dst] = i % 2 === 0 ? [a, b] : [b, a];
          const rollback = i % 10 === 9;
          await client.query('BEGIN');
          try {
            await client.query({ name: 'credit', text: S.credit, values: [amt, dst] });
            await client.query({ name: 'debit', text: S.debit, values: [amt, src] });
            const got = Number(await one(client, 'balance', S.balance, [dst]));
            stats.reads++;
            if (got !== bal[dst] + amt) stats.badRead(`in-transaction balance ${dst}`, got, bal[dst] + amt);
            if (i % 4 === 0) stats.tz('inside a transaction', await showTz(), zone);
          } catch (e) {
            await client.query('ROLLBACK');
            throw e;
          }
          if (rollback) {
            await client.query('ROLLBACK');
            stats.rollbacks++;
          } else {
            await client.query('COMMIT');
            stats.commits++;
            bal[dst] += amt;
            bal[src] -= amt;
          }
        }
      }
      if (i % 6 === 0) stats.tz(`iteration ${i}`, await showTz(), zone);
      if (w === 0 && i === Math.floor(ITERATIONS / 2)) await cancelCheck(client, url, rep);
      stats.done++;
    }
    stats.tz('at the end', await showTz(), zone);
  } finally {
    Object.assign(balances, bal);
    await within(client.end(), 5000);
  }
}

// node-postgres's appname tests and its notification processId: an app
// without application_name sees '', a configured one is reflected, and its own
// notifications carry the pid of its BackendKeyData (client.processID).
async function hygieneCheck(url, rep) {
  const appName = async (cfg) => {
    const c = new pg.Client({ connectionString: url, ...cfg });
    await c.connect();
    const r = await c.query('SHOW application_name');
    await c.end();
    return r.rows[0].application_name;
  };
  const byDefault = await appName({});
  rep.check(byDefault === '', 'application_name default', JSON.stringify(byDefault));
  const configured = await appName({ application_name: 'drv_cfg' });
  rep.check(configured === 'drv_cfg', 'application_name from config', JSON.stringify(configured));
  const fallback = await appName({ fallback_application_name: 'drv_fb' });
  rep.check(fallback === 'drv_fb', 'fallback_application_name', JSON.stringify(fallback));
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  const pids = [];
  c.on('notification', (n) => pids.push(n.processId));
  await c.query('LISTEN hp_drv_chan');
  await c.query("NOTIFY hp_drv_chan, 'hi'");
  await c.query('SELECT 1');
  rep.check(pids.length === 1 && pids[0] === c.processID, 'own notification pid',
    `${JSON.stringify(pids)} vs processID ${c.processID}`);
  await c.end();
}

async function main(url) {
  const rep = new Report(DRIVER);
  const S = statements(DRIVER);
  const [acc] = tables(DRIVER);
  try {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    for (const sql of setupSql(DRIVER)) await c.query(sql);
    await c.end();
    rep.check(true, 'setup', `${acc} with ${ACCOUNTS} accounts`);
  } catch (e) {
    rep.error('setup', e);
    rep.finish();
  }
  try {
    await hygieneCheck(url, rep);
  } catch (e) {
    rep.error('hygiene check', e);
  }

  const stats = Array.from({ length: WORKERS }, (_, w) => new WorkerStats(w));
  const balances = {};
  const all = Promise.all(stats.map((s, w) => worker(w, url, rep, S, s, balances)
    .catch((e) => rep.error(`worker ${w} iteration ${s.done}`, e))));
  if (await within(all, DEADLINE_MS) === 'timeout') {
    rep.error('workers', new Error(`did not finish within ${DEADLINE_MS / 1000}s`));
  }
  stats.forEach((s, w) => s.report(rep, ZONES[w]));
  if (!rep.cancelDone) {
    // Worker 0 stopped before its mid-run cancel: still say whether cancel works.
    const c = new pg.Client({ connectionString: url });
    try {
      await c.connect();
      await cancelCheck(c, url, rep, ' (own connection: worker 0 stopped early)');
    } catch (e) {
      rep.error('cancel check', e);
    }
    await within(c.end(), 5000);
  }

  try {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    const rows = (await c.query(`SELECT id, balance FROM ${acc} ORDER BY id`)).rows;
    const total = Number((await c.query(`SELECT sum(balance)::bigint AS s FROM ${acc}`)).rows[0].s);
    await c.end();
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
  console.error('usage: node pg_test.mjs URL');
  process.exit(2);
}
main(process.argv[2]);
