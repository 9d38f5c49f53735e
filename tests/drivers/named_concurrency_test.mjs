#!/usr/bin/env node
// Named prepared statements shared by concurrent sessions (issue 28 item 1).
// 8 node-postgres clients and 8 postgres.js clients (run one after the other)
// each loop over three named statements whose names the clients share
// (`addN`: SELECT $1::int + $2::int + N) and a short write transaction
// (BEGIN; UPDATE; COMMIT). Through `serve --pool-size 2` every client's
// statements land on origin connections other clients used before: none
// may ever be missing ("prepared statement ... does not exist") and every
// sum must be right. Directly there are no errors either.
//
// usage: node named_concurrency_test.mjs URL [pg|postgresjs|both]
import pg from 'pg';
import postgres from 'postgres';
import { Report } from './drvcommon.mjs';

const CLIENTS = 8;
const ROUNDS = Number(process.env.DRV_NAMED_ROUNDS || 40);
const NAMES = 3;
const TABLE = 'drv_named_counter';
const DEADLINE_MS = 50000;

const url = process.argv[2];
const which = process.argv[3] || 'both';
const rep = new Report('named_concurrency');

async function setup() {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  await c.query(`DROP TABLE IF EXISTS ${TABLE}`);
  await c.query(`CREATE TABLE ${TABLE} (id int PRIMARY KEY, n bigint NOT NULL)`);
  await c.query(`INSERT INTO ${TABLE} SELECT g, 0 FROM generate_series(0, ${2 * CLIENTS - 1}) g`);
  await c.end();
}

async function counters() {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  const r = await c.query(`SELECT id, n FROM ${TABLE} ORDER BY id`);
  await c.end();
  return r.rows.map((row) => Number(row.n));
}

// One node-postgres client: named queries (pg prepares each name once per
// connection and then only Binds it), and a write transaction.
async function pgClient(i, stats) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    for (let r = 0; r < ROUNDS; r++) {
      for (let k = 0; k < NAMES; k++) {
        const n = (i + r + k) % NAMES;
        try {
          const res = await c.query({ name: `add${n}`, text: `SELECT $1::int + $2::int + ${n} AS s`, values: [1, 2] });
          if (Number(res.rows[0].s) !== 3 + n) stats.bad.push(`pg client ${i}: add${n}(1,2) = ${res.rows[0].s}`);
        } catch (e) {
          stats.errors.push(`pg client ${i} add${n}: [${e.code}] ${e.message}`);
        }
      }
      try {
        await c.query('BEGIN');
        await c.query({ name: 'bump', text: `UPDATE ${TABLE} SET n = n + 1 WHERE id = $1`, values: [i] });
        await c.query('COMMIT');
        stats.commits[i]++;
      } catch (e) {
        stats.errors.push(`pg client ${i} transaction: [${e.code}] ${e.message}`);
        await c.query('ROLLBACK').catch(() => {});
      }
    }
  } finally {
    await c.end();
  }
}

// One postgres.js client: prepare: true names every statement itself
// (counter names shared across connections for different texts).
async function postgresjsClient(i, stats) {
  const sql = postgres(url, { max: 1, prepare: true, connect_timeout: 10, onnotice: () => {} });
  const id = CLIENTS + i;
  try {
    for (let r = 0; r < ROUNDS; r++) {
      for (let k = 0; k < NAMES; k++) {
        const n = (i + r + k) % NAMES;
        try {
          const rows = await sql.unsafe(`SELECT $1::int + $2::int + ${n} AS s`, [1, 2], { prepare: true });
          if (Number(rows[0].s) !== 3 + n) stats.bad.push(`postgres.js client ${i}: add${n} = ${rows[0].s}`);
        } catch (e) {
          stats.errors.push(`postgres.js client ${i} add${n}: [${e.code}] ${e.message}`);
        }
      }
      try {
        await sql.begin(async (tx) => {
          await tx.unsafe(`UPDATE ${TABLE} SET n = n + 1 WHERE id = $1`, [id], { prepare: true });
        });
        stats.commits[id]++;
      } catch (e) {
        stats.errors.push(`postgres.js client ${i} transaction: [${e.code}] ${e.message}`);
      }
    }
  } finally {
    await sql.end({ timeout: 5 });
  }
}

async function run(label, client) {
  const stats = { bad: [], errors: [], commits: new Array(2 * CLIENTS).fill(0) };
  const before = await counters();
  let timer;
  const all = Promise.all(Array.from({ length: CLIENTS }, (_, i) => client(i, stats)));
  const outcome = await Promise.race([
    all.then(() => 'done', (e) => e),
    new Promise((resolve) => { timer = setTimeout(() => resolve('timeout'), DEADLINE_MS); }),
  ]);
  clearTimeout(timer);
  rep.check(outcome === 'done', `${label}: ${CLIENTS} clients finished`, outcome === 'done' ? '' : String(outcome));
  rep.check(stats.errors.length === 0, `${label}: no errors`,
    `${stats.errors.length} errors${stats.errors.length ? ': ' + stats.errors.slice(0, 5).join('; ') : ''}`);
  rep.check(stats.bad.length === 0, `${label}: every sum right`, stats.bad.slice(0, 5).join('; '));
  const after = await counters();
  const lost = after.map((n, id) => n - before[id] - stats.commits[id]).filter((d) => d !== 0);
  rep.check(lost.length === 0, `${label}: committed counters`, lost.length ? `off by ${lost.join(',')}` : '');
}

try {
  await setup();
  if (which === 'pg' || which === 'both') await run('node-postgres', pgClient);
  if (which === 'postgresjs' || which === 'both') await run('postgres.js', postgresjsClient);
} catch (e) {
  rep.error('named concurrency', e);
}
rep.finish();
