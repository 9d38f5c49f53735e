#!/usr/bin/env node
// node-postgres (`pg`) and pg_terminate_backend with the pid a client holds
// (issue 28, item 5; as node-postgres's gh-issues/130 test): a pooled client's
// backend is terminated from another client; the pool gets the client's
// error event (57P01) and recovers. Then the same for a checked-out client,
// terminated with a bound parameter ($1), and twice with a named statement.
//
// usage: node terminate_pg.mjs URL   (prints one JSON line; exit 0 when all checks hold)
import pg from 'pg';

const url = process.argv[2];
const checks = [];
const check = (ok, what) => checks.push({ ok: Boolean(ok), what });
const within = (p, ms) => Promise.race([p, new Promise((resolve) => setTimeout(() => resolve('timeout'), ms))]);

async function main() {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  const poolError = new Promise((resolve) => pool.once('error', resolve));
  const killer = new pg.Client({ connectionString: url });
  await killer.connect();

  // 1. An idle pooled client.
  const victim = await pool.connect();
  await victim.query('SELECT 1');
  const pid = victim.processID;
  victim.release();
  const r = await killer.query(`SELECT pg_terminate_backend(${pid})`);
  check(r.rows[0].pg_terminate_backend === true, 'pg_terminate_backend(pid of an idle pooled client) answers t');
  const err = await within(poolError, 10000);
  check(err !== 'timeout', 'the pool gets the terminated client\'s error event');
  check(err && err.code === '57P01', `...with 57P01 (${err && err.code}: ${err && err.message})`);
  const after = await pool.query('SELECT 41 + 1 AS x');
  check(after.rows[0].x === 42, 'the pool recovers: the next query is served');

  // 2. A checked-out client, terminated with a bound parameter.
  const held = await pool.connect();
  await held.query('SELECT 1');
  const heldErrors = [];
  held.on('error', (e) => heldErrors.push(e));
  const heldError = new Promise((resolve) => held.once('error', resolve));
  const r2 = await killer.query('SELECT pg_terminate_backend($1)', [held.processID]);
  check(r2.rows[0].pg_terminate_backend === true, 'pg_terminate_backend($1) with a checked-out client\'s pid answers t');
  const e2 = await within(heldError, 10000);
  check(e2 !== 'timeout' && e2.code === '57P01', `the checked-out client gets an error event with 57P01 (${e2 && e2.code})`);
  held.release(e2);
  const again = await pool.query('SELECT 2 AS x');
  check(again.rows[0].x === 2, 'the pool recovers after it too');

  // 3. A named statement (node-postgres and PgJDBC name theirs): parsed and
  // bound in one batch the first time, bound alone the next; both times the
  // client named is the one terminated.
  for (const round of [1, 2]) {
    const c = new pg.Client({ connectionString: url });
    c.on('error', () => {});  // (later errors of the ended client, if any)
    const cError = new Promise((resolve) => c.once('error', resolve));
    await c.connect();
    await c.query('SELECT random()');  // (its session reaches the Endpoint: not a cache hit)
    const r3 = await killer.query({ name: 'kill_named', text: 'SELECT pg_terminate_backend($1)', values: [c.processID] });
    check(r3.rows[0].pg_terminate_backend === true, `named statement, round ${round}: answers t`);
    const e3 = await within(cError, 10000);
    check(e3 !== 'timeout' && e3.code === '57P01', `named statement, round ${round}: the client named gets 57P01 (${e3 && e3.code})`);
    await c.end().catch(() => {});
  }

  await killer.end();
  await pool.end();
}

main()
  .catch((e) => check(false, `unexpected: ${e && e.stack}`))
  .finally(() => {
    const failed = checks.filter((c) => !c.ok);
    console.log(JSON.stringify({ passed: checks.length - failed.length, failed }));
    process.exit(failed.length === 0 && checks.length > 0 ? 0 : 1);
  });
