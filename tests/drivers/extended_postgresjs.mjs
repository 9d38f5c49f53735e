#!/usr/bin/env node
// postgres.js (prepare: true, the default) and the extended-protocol work the
// Client answers itself (docs/architecture.md, "Statement metadata at the
// Client"). Prints one JSON line per step so a harness can compare a run
// through hyperpool with a direct one.
//
// usage: node extended_postgresjs.mjs URL MODE [ARG]
//   reads TAG N [agg] a fresh client: its connect-time type query, then 5
//                    distinct reads (each repeated N times) of table ext_pgjs;
//                    with agg the fifth is an aggregate (count, max), which
//                    calls functions (as the seed workload's sum does)
//   write            read, UPDATE through the same client, read again
//   ddl ADMIN_URL    prepare on one client, ALTER the table directly on the
//                    origin, run it again: what the driver sees
//   pipeline         20 queries in flight on one connection
import postgres from 'postgres';

const [url, mode, arg, arg2, arg3] = process.argv.slice(2);
const out = (o) => console.log(JSON.stringify(o));
let firstSent = null;

function connect(u, extra = {}) {
  const t0 = process.hrtime.bigint();
  // Records when the first query is sent (the local handshake is over).
  const debug = (c, q) => {
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    if (firstSent === null) firstSent = ms;
    if (process.env.EXT_DEBUG) console.error(Math.round(ms), q.slice(0, 60).replace(/\s+/g, ' '));
  };
  return postgres(u, { max: 1, prepare: true, connect_timeout: 10, onnotice: () => {}, debug, ...extra });
}

async function main() {
  if (mode === 'setup') {
    const sql = connect(url);
    await sql.unsafe('DROP TABLE IF EXISTS ext_pgjs; CREATE TABLE ext_pgjs(k int primary key, v text); ' +
      "INSERT INTO ext_pgjs SELECT g, 'v' || g FROM generate_series(1, 20) g");
    await sql.end();
    out({ setup: true });
  } else if (mode === 'reads') {
    const tag = arg;
    const n = Number(arg2 || 1);
    const t0 = process.hrtime.bigint();
    const sql = connect(url);
    const got = [];
    const marks = [];
    for (let r = 0; r < n; r++) {
      for (let i = 1; i <= 5; i++) {
        const text = i === 5 && arg3 === 'agg'
          ? `SELECT count(*) AS n, max(v) AS v FROM ext_pgjs WHERE k <= $1 /* ${tag} ${i} */`
          : `SELECT v FROM ext_pgjs WHERE k = $1 /* ${tag} ${i} */`;
        const rows = await sql.unsafe(text, [i], { prepare: true });
        got.push(rows[0].v);
        marks.push(Math.round(Number(process.hrtime.bigint() - t0) / 1e6));
      }
    }
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    await sql.end();
    out({ reads: got, ms: Math.round(ms), connected_ms: Math.round(firstSent), marks });
  } else if (mode === 'write') {
    const sql = connect(url);
    const before = (await sql`SELECT v FROM ext_pgjs WHERE k = 7`)[0].v;
    const again = (await sql`SELECT v FROM ext_pgjs WHERE k = 7`)[0].v;
    await sql`UPDATE ext_pgjs SET v = ${'w' + Date.now()} WHERE k = 7`;
    const after = (await sql`SELECT v FROM ext_pgjs WHERE k = 7`)[0].v;
    await sql`UPDATE ext_pgjs SET v = 'v7' WHERE k = 7`;
    await sql.end();
    out({ before, again, changed: after !== before && after.startsWith('w') });
  } else if (mode === 'ddl') {
    const admin = connect(arg);
    await admin.unsafe('DROP TABLE IF EXISTS ext_ddl; CREATE TABLE ext_ddl(a int); INSERT INTO ext_ddl VALUES (1)');
    // Another client prepares first: its metadata is what a later one gets locally.
    const first = connect(url);
    out({ step: 'first', rows: await first`SELECT * FROM ext_ddl` });
    await first.end();
    const sql = connect(url);
    // Parse + Describe answered (locally, through hyperpool); then DDL the
    // Endpoint never sees; then the Bind.
    const q = sql`SELECT * FROM ext_ddl`.describe();
    const d = await q;
    out({ step: 'described', columns: d.columns.map((c) => c.name) });
    await admin.unsafe('ALTER TABLE ext_ddl ADD COLUMN b int DEFAULT 2');
    try {
      out({ step: 'after ddl', rows: await sql`SELECT * FROM ext_ddl` });
    } catch (e) {
      out({ step: 'after ddl', error: e.code, message: e.message });
    }
    try {
      out({ step: 'again', rows: await sql`SELECT * FROM ext_ddl` });
    } catch (e) {
      out({ step: 'again', error: e.code, message: e.message });
    }
    await sql.end();
    await admin.end();
  } else if (mode === 'pipeline') {
    const sql = connect(url);
    const qs = [];
    for (let i = 1; i <= 20; i++) qs.push(sql`SELECT v FROM ext_pgjs WHERE k = ${i}`);
    const rows = await Promise.all(qs);
    await sql.end();
    out({ pipeline: rows.map((r) => r[0].v) });
  }
}

main().then(() => process.exit(0), (e) => { console.error(e); out({ error: e.code || String(e) }); process.exit(1); });
