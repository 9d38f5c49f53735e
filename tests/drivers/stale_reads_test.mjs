#!/usr/bin/env node
// No read older than an acknowledged write, and every row the one asked for,
// with the query cache on (its default) and many clients at once.
//
// A writer bumps a counter row and records each value once its driver has
// the answer (autocommit, or a transaction block); readers of both counter
// rows check every value they get against the newest acknowledged one
// recorded *before* they sent the read. A direct connection never fails
// that: a read sent after the write was acknowledged sees it. Through
// hyperpool, three phases, each one failing on an earlier version:
//   - node-postgres writer (autocommit), node-postgres readers, named and
//     unnamed statements: a follower served the leader's rows stamped with the
//     generation of when it ran, so the Client tier kept rows from before a
//     write whose invalidation it had already applied (~800 stale reads in
//     10 s);
//   - postgres.js writer and readers, prepare on and off;
//   - node-postgres writer, DDL from another connection, postgres.js readers
//     with prepare: false (describe first): a refresh left its wait on
//     another session's fetch behind, and that fetch's rows answered the
//     session's next read of another row ("id 2 saw 0", id 1's value).
//
// usage: node stale_reads_test.mjs URL
import pg from 'pg';
import postgres from 'postgres';
import { Report } from './drvcommon.mjs';

const url = process.argv[2];
const PHASE_MS = Number(process.env.DRV_STALE_PHASE_MS || 6000);
const READERS = 8;
const rep = new Report('stale_reads');
const T = 'drv_stale_counter';
const ROWS = 'drv_stale_rows';

async function admin(sqls) {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    for (const s of sqls) await c.query(s);
  } finally {
    await c.end();
  }
}

async function phase(label, { writer, readers, ddl }) {
  await admin([`DROP TABLE IF EXISTS ${T}`, `DROP TABLE IF EXISTS ${ROWS}`,
    `CREATE TABLE ${T} (id int PRIMARY KEY, n bigint NOT NULL)`, `INSERT INTO ${T} VALUES (1, 0), (2, 1000000)`,
    `CREATE TABLE ${ROWS} (id int PRIMARY KEY, v text)`, `INSERT INTO ${ROWS} VALUES (1, 'a')`]);
  const acked = { 1: 0, 2: 1000000 };  // row 1 is never written: it must stay 0
  const stop = Date.now() + PHASE_MS;
  const stats = { reads: 0, writes: 0, stale: [], wrong: [], errors: [] };
  const note = (e, who) => stats.errors.push(`${who}: ${e.message}`);
  const check = (id, n, before, who) => {
    if (id === 1 && n !== 0) stats.wrong.push(`${who}: row 1 read ${n}`);
    if (id === 2 && n < 1000000) stats.wrong.push(`${who}: row 2 read ${n} (another row's value)`);
    if (n < before) stats.stale.push(`${who}: row ${id} read ${n} after ${before} was acknowledged`);
    stats.reads++;
  };
  const tasks = [];
  tasks.push((async () => {
    let k = 0;
    if (writer === 'pg') {
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      try {
        while (Date.now() < stop) {
          let n;
          if (k++ % 3 !== 2) {
            n = (await c.query({ text: `UPDATE ${T} SET n = n + 1 WHERE id = $1 RETURNING n`, values: [2] })).rows[0].n;
          } else {
            await c.query('BEGIN');
            await c.query(`UPDATE ${ROWS} SET v = v WHERE id = 1`);
            n = (await c.query({ name: 'w', text: `UPDATE ${T} SET n = n + 1 WHERE id = $1 RETURNING n`, values: [2] })).rows[0].n;
            await c.query('COMMIT');
          }
          acked[2] = Math.max(acked[2], Number(n));
          stats.writes++;
        }
      } catch (e) { note(e, 'writer'); } finally { await c.end(); }
    } else {
      const sql = postgres(url, { max: 1 });
      try {
        while (Date.now() < stop) {
          let n;
          if (k++ % 3 !== 2) {
            [{ n }] = await sql`UPDATE ${sql(T)} SET n = n + 1 WHERE id = ${2} RETURNING n`;
          } else {
            n = await sql.begin(async (t) => {
              await t`UPDATE ${t(ROWS)} SET v = v WHERE id = 1`;
              const [{ n: m }] = await t`UPDATE ${t(T)} SET n = n + 1 WHERE id = ${2} RETURNING n`;
              return m;
            });
          }
          acked[2] = Math.max(acked[2], Number(n));
          stats.writes++;
        }
      } catch (e) { note(e, 'writer'); } finally { await sql.end(); }
    }
  })());
  if (ddl) {
    tasks.push((async () => {
      const c = new pg.Client({ connectionString: url });
      await c.connect();
      try {
        for (let k = 0; Date.now() < stop; k++) {
          await c.query(`ALTER TABLE ${ROWS} ADD COLUMN x${k} int`);
          await c.query(`ALTER TABLE ${ROWS} DROP COLUMN x${k}`);
        }
      } catch (e) { note(e, 'ddl'); } finally { await c.end(); }
    })());
  }
  for (let i = 0; i < READERS; i++) {
    const who = `${readers} reader ${i}`;
    tasks.push((async () => {
      if (readers === 'pg') {
        const c = new pg.Client({ connectionString: url });
        await c.connect();
        try {
          while (Date.now() < stop) {
            for (const id of [1, 2]) {
              const before = acked[id];
              const text = `SELECT n FROM ${T} WHERE id = $1`;
              const q = i % 2 ? { name: 'r', text, values: [id] } : { text, values: [id] };
              check(id, Number((await c.query(q)).rows[0].n), before, who);
            }
          }
        } catch (e) { note(e, who); } finally { await c.end(); }
      } else {
        const sql = postgres(url, { max: 1, prepare: i % 2 === 0 });
        try {
          while (Date.now() < stop) {
            for (const id of [1, 2]) {
              const before = acked[id];
              const [{ n }] = await sql`SELECT n FROM ${sql(T)} WHERE id = ${id}`;
              check(id, Number(n), before, who);
            }
          }
        } catch (e) { note(e, who); } finally { await sql.end(); }
      }
    })());
  }
  await Promise.all(tasks);
  rep.check(stats.errors.length === 0, `${label}: no driver errors`, stats.errors.slice(0, 3).join('; '));
  rep.check(stats.writes > 0 && stats.reads > 0, `${label}: writes and reads ran`, `${stats.writes} / ${stats.reads}`);
  rep.check(stats.wrong.length === 0, `${label}: every row the one asked for`,
    `${stats.wrong.length} of ${stats.reads}: ${stats.wrong.slice(0, 3).join('; ')}`);
  rep.check(stats.stale.length === 0, `${label}: no read older than an acknowledged write`,
    `${stats.stale.length} of ${stats.reads}: ${stats.stale.slice(0, 3).join('; ')}`);
}

try {
  await phase('node-postgres writer and readers', { writer: 'pg', readers: 'pg' });
  await phase('postgres.js writer and readers', { writer: 'js', readers: 'js' });
  await phase('node-postgres writer, DDL, postgres.js readers', { writer: 'pg', readers: 'js', ddl: true });
  await admin([`DROP TABLE IF EXISTS ${T}`, `DROP TABLE IF EXISTS ${ROWS}`]);
} catch (e) {
  rep.error('stale reads', e);
}
rep.finish();
