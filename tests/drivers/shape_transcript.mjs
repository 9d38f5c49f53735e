#!/usr/bin/env node
// Prepared statements across DROP / re-CREATE of their table (issue 28
// item 2), node-postgres and postgres.js: the same steps as
// shape_transcript.py, printing a transcript (rows, or the error's SQLSTATE
// and message) that must be the same through hyperpool as directly against
// PostgreSQL (tests/integration/driver_transcripts_test.sh compares them).
//
// usage: node shape_transcript.mjs URL DDL_URL
import pg from 'pg';
import postgres from 'postgres';

const TABLE = 'drv_shape_js';
const [url, ddlUrl] = process.argv.slice(2);
const HINT = url === ddlUrl ? '' : ' /* hyperpool:nocache */';

const DDL_STEPS = [
  ['same columns', [`DROP TABLE ${TABLE}`, `CREATE TABLE ${TABLE} (a int, b text)`,
    `INSERT INTO ${TABLE} VALUES (3, 'three')`]],
  ['same columns again', [`DROP TABLE ${TABLE}`, `CREATE TABLE ${TABLE} (a int, b text)`,
    `INSERT INTO ${TABLE} VALUES (4, 'four')`]],
  ['other columns', [`DROP TABLE ${TABLE}`, `CREATE TABLE ${TABLE} (a int, b text, c int)`,
    `INSERT INTO ${TABLE} VALUES (5, 'five', 50)`]],
  ['renamed column', [`ALTER TABLE ${TABLE} RENAME COLUMN c TO d`]],
  ['other type', [`ALTER TABLE ${TABLE} ALTER COLUMN d TYPE bigint`]],
  ['back to two columns', [`DROP TABLE ${TABLE}`, `CREATE TABLE ${TABLE} (a int, b text)`,
    `INSERT INTO ${TABLE} VALUES (6, 'six')`]],
];

async function ddl(statements) {
  const c = new pg.Client({ connectionString: ddlUrl });
  await c.connect();
  for (const s of statements) await c.query(s);
  await c.end();
}

const show = (rows) => rows.map((r) => JSON.stringify(r)).join(' ') || '(no rows)';
const error = (e) => `error ${e.code || ''} ${e.message}`;

// node-postgres: a named query (prepared once per connection, then only
// bound), an unnamed one, and a named one inside a transaction block.
async function pgPart() {
  const conns = [];
  for (let i = 0; i < 3; i++) {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    conns.push(c);
  }
  const text = `SELECT * FROM ${TABLE} ORDER BY 1${HINT}`;
  const holders = [
    ['named', async () => show((await conns[0].query({ name: 'shape_q', text })).rows)],
    ['unnamed', async () => show((await conns[1].query(text)).rows)],
    ['named in transaction', async () => {
      const c = conns[2];
      try {
        await c.query('BEGIN');
        const r = await c.query({ name: 'shape_t', text: `SELECT a, b FROM ${TABLE} WHERE a > $1 ORDER BY 1${HINT}`, values: [0] });
        await c.query('COMMIT');
        return show(r.rows);
      } catch (e) {
        await c.query('ROLLBACK');
        throw e;
      }
    }],
  ];
  await steps('pg', holders);
  for (const c of conns) await c.end();
}

// postgres.js: prepare: true (it re-prepares once on 0A000 outside a
// transaction), inside sql.begin, and prepare: false.
async function postgresjsPart() {
  const opts = { max: 1, connect_timeout: 10, onnotice: () => {} };
  const prepared = postgres(url, { ...opts, prepare: true });
  const tx = postgres(url, { ...opts, prepare: true });
  const unprepared = postgres(url, { ...opts, prepare: false });
  const text = `SELECT * FROM ${TABLE} ORDER BY 1${HINT}`;
  const holders = [
    ['prepared', async () => show(await prepared.unsafe(text, [], { prepare: true }))],
    ['prepared in transaction', async () => show(await tx.begin((t) => t.unsafe(text, [], { prepare: true })))],
    ['unprepared', async () => show(await unprepared.unsafe(text))],
  ];
  await steps('postgres.js', holders);
  for (const s of [prepared, tx, unprepared]) await s.end({ timeout: 5 });
}

async function steps(driver, holders) {
  const run = async (label, step, n, fn) => {
    for (let i = 0; i < n; i++) {
      let line;
      try {
        line = await fn();
      } catch (e) {
        line = error(e);
      }
      console.log(`${driver} ${label} ${step}#${i}: ${line}`);
    }
  };
  for (const [label, fn] of holders) await run(label, 'start', 2, fn);
  for (const [step, statements] of DDL_STEPS) {
    await ddl(statements);
    for (const [label, fn] of holders) await run(label, step, 2, fn);
  }
}

const reset = [`DROP TABLE IF EXISTS ${TABLE}`, `CREATE TABLE ${TABLE} (a int, b text)`,
  `INSERT INTO ${TABLE} VALUES (1, 'one'), (2, 'two')`];
await ddl(reset);
await pgPart();
await ddl(reset);
await postgresjsPart();
await ddl([`DROP TABLE IF EXISTS ${TABLE}`]);
console.log('END');
