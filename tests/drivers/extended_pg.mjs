#!/usr/bin/env node
// node-postgres (`pg`) with named statements ({ name, text, values }) and the
// query cache (docs/architecture.md, "Query cache"). One JSON line per step.
//
// usage: node extended_pg.mjs URL reads TAG N | write
import pg from 'pg';

const [url, mode, tag, n] = process.argv.slice(2);
const out = (o) => console.log(JSON.stringify(o));

async function main() {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  if (mode === 'reads') {
    const got = [];
    for (let r = 0; r < Number(n || 1); r++) {
      for (let i = 1; i <= 5; i++) {
        const res = await c.query({ name: `ext_${tag}_${i}`, text: `SELECT v FROM ext_py WHERE k = $1 /* ${tag} ${i} */`, values: [i] });
        got.push(res.rows[0].v);
      }
      // Binary results.
      const res = await c.query({ name: `ext_${tag}_b`, text: `SELECT k FROM ext_py WHERE k = $1 /* ${tag} b */`, values: [6], binary: true });
      got.push(res.rows[0].k);
    }
    out({ reads: got });
  } else if (mode === 'write') {
    const q = { name: 'ext_w', text: 'SELECT v FROM ext_py WHERE k = $1', values: [10] };
    const before = (await c.query(q)).rows[0].v;
    const again = (await c.query(q)).rows[0].v;
    await c.query({ name: 'ext_u', text: 'UPDATE ext_py SET v = $1 WHERE k = $2', values: ['w10', 10] });
    const after = (await c.query(q)).rows[0].v;
    await c.query({ name: 'ext_u', text: 'UPDATE ext_py SET v = $1 WHERE k = $2', values: ['v10', 10] });
    out({ before, again, after });
  }
  await c.end();
}

main().then(() => process.exit(0), (e) => { out({ error: e.code || String(e) }); process.exit(1); });
