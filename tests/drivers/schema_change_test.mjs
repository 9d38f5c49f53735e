#!/usr/bin/env node
// postgres.js and a table whose columns change under a prepared statement
// (issue 15 item 0): `select * from t` is prepared on several connections,
// t is dropped and recreated with other columns on another connection, and
// the statement is executed again on every connection. PostgreSQL answers
// 0A000 "cached plan must not change result type" (routine
// RevalidateCachedQuery) and postgres.js re-prepares transparently, so the
// result must be rows of the NEW shape, never rows of one shape decoded with
// the other's description. The same program runs direct and through
// hyperpool (drivers_test.sh DRIVERS=postgresjs_schema).
//
// usage: node schema_change_test.mjs URL
import postgres from 'postgres';
import { Report } from './drvcommon.mjs';

const DRIVER = 'postgresjs_schema';
const TABLE = 'drv_postgresjs_schema_t';
const CONNECTIONS = 4;
const ROUNDS = 3;

const url = process.argv[2];
const rep = new Report(DRIVER);
const sql = postgres(url, { max: CONNECTIONS, prepare: true, connect_timeout: 10, onnotice: () => {} });
const ddl = postgres(url, { max: 1, prepare: false, connect_timeout: 10, onnotice: () => {} });

// Runs `select * from TABLE` once on each of the CONNECTIONS connections (at
// once, so postgres.js spreads them) and returns the rows of each.
async function everywhere() {
  return Promise.all(Array.from({ length: CONNECTIONS }, () => sql`select * from ${sql(TABLE)} order by 1`));
}

function shapeOf(rows) {
  return rows.map((r) => JSON.stringify(r)).join(' ');
}

// Through a pool of 2 the next execution must land on the origin connection
// that LACKS the statement (its re-prepare must not return rows of the new
// shape under the old description): two holders keep both connections in a
// transaction while the execution waits for one; the holder whose backend is
// not the one the statement was prepared on commits first. Directly the
// same steps run on separate backends.
async function landsElsewhere(ddl, label) {
  const opts = { max: 1, prepare: false, connect_timeout: 10, onnotice: () => {} };
  const holders = [postgres(url, opts), postgres(url, opts)];
  const client = postgres(url, { ...opts, prepare: true });
  const pid = async (s) => (await s.unsafe('SELECT pg_backend_pid() AS p'))[0].p;
  try {
    await ddl.unsafe(`CREATE TABLE ${TABLE} (a int, b text)`);
    await ddl.unsafe(`INSERT INTO ${TABLE} VALUES (1, 'one')`);
    const first = await client`select *, pg_backend_pid() AS p from ${client(TABLE)} order by 1`;
    const preparedOn = first[0].p;
    const before = JSON.stringify({ a: first[0].a, b: first[0].b });
    await ddl.unsafe(`DROP TABLE ${TABLE}`);
    await ddl.unsafe(`CREATE TABLE ${TABLE} (x int, y int, z text)`);
    await ddl.unsafe(`INSERT INTO ${TABLE} VALUES (10, 20, 'new')`);
    const held = [];
    for (const h of holders) {
      await h.unsafe('BEGIN');
      held.push(await pid(h));
    }
    const pending = client`select *, pg_backend_pid() AS p from ${client(TABLE)} order by 1`.execute();
    const settled = pending.then((rows) => rows, (e) => e);
    const other = held[0] === preparedOn ? 1 : 0;
    await holders[other].unsafe('COMMIT');
    const got = await settled;
    await holders[1 - other].unsafe('COMMIT');
    const after = got instanceof Error ? `${got.code || ''} ${got.message}`
      : JSON.stringify(Object.fromEntries(Object.entries(got[0]).filter(([k]) => k !== 'p')));
    rep.check(before === '{"a":1,"b":"one"}' && after === '{"x":10,"y":20,"z":"new"}',
      `new shape where the re-prepare lands on a connection that lacks the statement (${label})`,
      `${before} -> ${after}`);
    await ddl.unsafe(`DROP TABLE ${TABLE}`);
  } finally {
    for (const h of holders) await h.end({ timeout: 5 });
    await client.end({ timeout: 5 });
  }
}

try {
  await ddl.unsafe(`DROP TABLE IF EXISTS ${TABLE}`);
  await ddl.unsafe(`CREATE TABLE ${TABLE} (a int, b text)`);
  await ddl.unsafe(`INSERT INTO ${TABLE} VALUES (1, 'one'), (2, 'two')`);
  const before = await everywhere();
  const want1 = '{"a":1,"b":"one"} {"a":2,"b":"two"}';
  rep.check(before.every((rows) => shapeOf(rows) === want1), 'old shape on every connection',
    before.map(shapeOf).join(' | '));

  await ddl.unsafe(`DROP TABLE ${TABLE}`);
  await ddl.unsafe(`CREATE TABLE ${TABLE} (x int, y int, z text)`);
  await ddl.unsafe(`INSERT INTO ${TABLE} VALUES (10, 20, 'new')`);
  const want2 = '{"x":10,"y":20,"z":"new"}';
  for (let round = 0; round < ROUNDS; round++) {
    let got;
    try {
      got = await everywhere();
    } catch (e) {
      rep.check(false, `round ${round}: new shape after DROP/CREATE`, `${e.code || ''} ${e.routine || ''} ${e.message}`);
      continue;
    }
    rep.check(got.every((rows) => shapeOf(rows) === want2), `round ${round}: new shape after DROP/CREATE`,
      got.map(shapeOf).join(' | '));
  }

  // Same again with a column type change only (same names, other type).
  await ddl.unsafe(`ALTER TABLE ${TABLE} ALTER COLUMN y TYPE text USING y::text`);
  const want3 = '{"x":10,"y":"20","z":"new"}';
  let got3;
  try {
    got3 = (await everywhere()).map(shapeOf).join(' | ');
  } catch (e) {
    got3 = `${e.code || ''} ${e.message}`;
  }
  rep.check(got3 === Array(CONNECTIONS).fill(want3).join(' | '), 'new column type after ALTER', got3);
  await ddl.unsafe(`DROP TABLE ${TABLE}`);
  await landsElsewhere(ddl, 'DDL through the same URL');
  // DDL that bypasses the pooler (drivers_test.sh passes the origin's URL).
  const direct = postgres(process.env.DRV_DIRECT_URL || url, { max: 1, prepare: false, onnotice: () => {} });
  await landsElsewhere(direct, 'DDL on the origin directly');
  await direct.end({ timeout: 5 });
} catch (e) {
  rep.error('schema change', e);
}
await sql.end({ timeout: 5 });
await ddl.end({ timeout: 5 });
rep.finish();
