#!/usr/bin/env node
// postgres.js 3.x `sql.subscribe` (logical replication over its own
// replication=database connection, pgoutput, CopyBoth): a publication on
// one table, an insert and an update from a pooled connection, and the
// changes as the subscriber sees them, in order. The origin needs
// wal_level = logical.
//
// usage: node subscribe_postgresjs.mjs URL   (prints one JSON line; exit 0 when all checks hold)
import postgres from 'postgres';

const url = process.argv[2];
const checks = [];
const check = (ok, what) => checks.push({ ok: Boolean(ok), what });

async function main() {
  const sql = postgres(url, { max: 2, publications: 'hp_sub_pub', onnotice: () => {} });
  await sql`DROP TABLE IF EXISTS hp_sub_t`;
  await sql`CREATE TABLE hp_sub_t (id int PRIMARY KEY, v text)`;
  await sql`DROP PUBLICATION IF EXISTS hp_sub_pub`;
  await sql`CREATE PUBLICATION hp_sub_pub FOR TABLE hp_sub_t`;
  const seen = [];
  let subscribed;
  const ready = new Promise((resolve) => { subscribed = resolve; });
  const { unsubscribe } = await sql.subscribe('*:hp_sub_t',
    (row, info) => seen.push(`${info.command}:${row.id}:${row.v}`), () => subscribed());
  await ready;
  await sql`INSERT INTO hp_sub_t VALUES (1, 'one'), (2, 'two')`;
  await sql`UPDATE hp_sub_t SET v = 'uno' WHERE id = 1`;
  const deadline = Date.now() + 20000;
  while (seen.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  check(JSON.stringify(seen) === JSON.stringify(['insert:1:one', 'insert:2:two', 'update:1:uno']),
        `the subscriber saw the insert and the update in order (${JSON.stringify(seen)})`);
  await unsubscribe();
  await sql`DROP PUBLICATION hp_sub_pub`;
  await sql`DROP TABLE hp_sub_t`;
  await sql.end({ timeout: 5 });
}

main().then(
  () => {
    console.log(JSON.stringify(checks));
    process.exit(checks.every((c) => c.ok) ? 0 : 1);
  },
  (e) => {
    console.log(JSON.stringify([...checks, { ok: false, what: `error: ${e.code || ''} ${e.message}` }]));
    process.exit(1);
  });
