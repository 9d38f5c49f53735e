#!/usr/bin/env node
// TLS towards applications with the JavaScript drivers: node-postgres and
// postgres.js connect with certificate verification against a CA (the
// name checked is the host's, "localhost"), run a query and read back that
// the Client's parameters arrived inside TLS. A CA that did not sign the
// certificate must be refused by both.
//
// usage: node ssl_test.mjs HOST PORT USER PASSWORD DATABASE CA_FILE WRONG_CA_FILE
import fs from 'node:fs';
import pg from 'pg';
import postgres from 'postgres';

const [host, port, user, password, database, caFile, wrongCaFile] = process.argv.slice(2);
const ca = fs.readFileSync(caFile);
const wrongCa = fs.readFileSync(wrongCaFile);
let failures = 0;
const check = (ok, what) => {
  console.log(`${ok ? 'ok' : 'FAIL'}: ${what}`);
  if (!ok) failures++;
};

async function withPg(caPem) {
  const client = new pg.Client({ host, port: Number(port), user, password, database,
                                 ssl: { ca: caPem, rejectUnauthorized: true }, connectionTimeoutMillis: 10000 });
  await client.connect();
  try {
    const res = await client.query('SELECT $1::int + 1 AS n', [41]);
    return { n: res.rows[0].n, encrypted: client.connection.stream.encrypted === true };
  } finally {
    await client.end();
  }
}

async function withPostgresJs(caPem) {
  const sql = postgres({ host, port: Number(port), user, password, database, max: 1,
                         ssl: { ca: caPem, rejectUnauthorized: true }, connect_timeout: 10 });
  try {
    const rows = await sql`SELECT ${41}::int + 1 AS n`;
    return { n: rows[0].n };
  } finally {
    await sql.end({ timeout: 5 });
  }
}

try {
  const r = await withPg(ca);
  check(r.n === 42 && r.encrypted, `pg over verified TLS: n=${r.n} encrypted=${r.encrypted}`);
} catch (e) {
  check(false, `pg over verified TLS: ${e.message}`);
}
try {
  await withPg(wrongCa);
  check(false, 'pg accepted a certificate its CA did not sign');
} catch (e) {
  check(true, `pg refused an unknown CA: ${e.message}`);
}
try {
  const r = await withPostgresJs(ca);
  check(r.n === 42, `postgres.js over verified TLS: n=${r.n}`);
} catch (e) {
  check(false, `postgres.js over verified TLS: ${e.message}`);
}
try {
  await withPostgresJs(wrongCa);
  check(false, 'postgres.js accepted a certificate its CA did not sign');
} catch (e) {
  check(true, `postgres.js refused an unknown CA: ${e.message}`);
}
process.exit(failures === 0 ? 0 : 1);
