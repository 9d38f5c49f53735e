#!/usr/bin/env node
// The seed's benchmark workload with postgres.js itself (the driver of the
// Hyperdrive write-up): per iteration a fresh postgres() client (max: 1,
// prepare: true, its defaults otherwise: a type lookup at connect, named
// statements, Describe before the first Bind) runs 5 distinct OLTP reads on
// pgbench's standard tables and ends. Timed from postgres() to end()'s
// resolution. Prints one JSON line per measured iteration:
//   {"iteration": 1, "ms": 812.3}
// and exits non-zero on a wrong result or an error.
//
// usage: node bench/seed_postgresjs.mjs URL ITERATIONS WARMUP
//   URL  postgresql://USER:PASS@HOST:PORT/DB?sslmode=disable
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

// postgres.js as installed for the driver tests (tests/drivers/node_modules).
const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', 'tests', 'drivers', 'package.json'));
const postgres = require('postgres');

const [url, iterationsArg, warmupArg] = process.argv.slice(2);
if (!url) {
  console.error('usage: node seed_postgresjs.mjs URL ITERATIONS WARMUP');
  process.exit(2);
}
const iterations = Number(iterationsArg ?? 10);
const warmup = Number(warmupArg ?? 1);

// Five distinct reads with fixed parameters (the same statements and values
// in every iteration, as a page render repeats them): point reads on each of
// pgbench's three tables, a short range and a small aggregate.
const reads = [
  [(sql) => sql`select abalance from pgbench_accounts where aid = ${42}`, 1],
  [(sql) => sql`select bid, bbalance from pgbench_branches where bid = ${1}`, 1],
  [(sql) => sql`select tid, bid, tbalance from pgbench_tellers where tid = ${7}`, 1],
  [(sql) => sql`select aid, abalance from pgbench_accounts where aid between ${100} and ${119} order by aid`, 20],
  [(sql) => sql`select count(*)::int as n, sum(abalance)::int as total from pgbench_accounts where aid between ${1000} and ${1099}`, 1],
];

async function iteration() {
  const start = process.hrtime.bigint();
  const sql = postgres(url, { max: 1, prepare: true, connect_timeout: 30, onnotice: () => {} });
  try {
    for (const [query, rows] of reads) {
      const result = await query(sql);
      if (result.length !== rows) throw new Error(`expected ${rows} rows, got ${result.length}`);
    }
  } finally {
    await sql.end({ timeout: 5 });
  }
  return Number(process.hrtime.bigint() - start) / 1e6;
}

for (let i = 1; i <= warmup + iterations; i++) {
  const ms = await iteration();
  if (i > warmup) console.log(JSON.stringify({ iteration: i - warmup, ms: Math.round(ms * 100) / 100 }));
}
