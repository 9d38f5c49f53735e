// Shared pieces of the JavaScript driver programs (pg_test.mjs, postgresjs_test.mjs);
// the same workload as drvcommon.py (see README.md).

export const WORKERS = 8;
export const ITERATIONS = Number(process.env.DRV_ITERATIONS || 60);
export const ACCOUNTS = 2 * WORKERS;
export const START_BALANCE = 1000;
export const REF_ROWS = 50;
export const CANCEL_AFTER_MS = 500;
export const CANCEL_LIMIT_MS = 1000;
export const DEADLINE_MS = 50000;
export const ZONES = [
  'Asia/Tokyo', 'Europe/Paris', 'America/New_York', 'Australia/Sydney',
  'Africa/Cairo', 'America/Sao_Paulo', 'Asia/Kolkata', 'Pacific/Auckland',
];

export function tables(driver) {
  return [`drv_${driver}_accounts`, `drv_${driver}_ref`];
}

export function setupSql(driver) {
  const [acc, ref] = tables(driver);
  return [
    `DROP TABLE IF EXISTS ${acc}`,
    `DROP TABLE IF EXISTS ${ref}`,
    `CREATE TABLE ${acc} (id int PRIMARY KEY, balance bigint NOT NULL)`,
    `CREATE TABLE ${ref} (k int PRIMARY KEY, v text NOT NULL)`,
    `INSERT INTO ${acc} SELECT g, ${START_BALANCE} FROM generate_series(1, ${ACCOUNTS}) g`,
    `INSERT INTO ${ref} SELECT g, 'v' || g FROM generate_series(1, ${REF_ROWS}) g`,
  ];
}

export function statements(driver) {
  const [acc, ref] = tables(driver);
  return {
    ref: `SELECT v FROM ${ref} WHERE k = $1`,
    balance: `SELECT balance FROM ${acc} WHERE id = $1`,
    pair: `SELECT sum(balance)::bigint AS s FROM ${acc} WHERE id IN ($1, $2)`,
    credit: `UPDATE ${acc} SET balance = balance + $1 WHERE id = $2`,
    debit: `UPDATE ${acc} SET balance = balance - $1 WHERE id = $2`,
    probe_even: 'SELECT $1::int * 2 AS v',
    probe_odd: 'SELECT $1::int * 3 AS v',
  };
}

export function probe(worker) {
  return worker % 2 === 0 ? ['probe_even', 2] : ['probe_odd', 3];
}

export function opsOrder(worker) {
  const ops = ['ref', 'balance', 'probe', 'pair', 'transfer'];
  const r = worker % ops.length;
  return ops.slice(r).concat(ops.slice(0, r));
}

export class Report {
  constructor(driver) {
    this.driver = driver;
    this.passed = 0;
    this.failed = 0;
    this.errors = 0;
  }

  check(ok, name, detail = '') {
    if (ok) this.passed++; else this.failed++;
    console.log(`${ok ? 'ok  ' : 'FAIL'} ${this.driver}: ${name}${detail ? ' - ' + detail : ''}`);
    return ok;
  }

  error(where, e) {
    this.errors++;
    const code = e && e.code ? ` [${e.code}]` : '';
    console.log(`ERROR ${this.driver}: ${where}: ${(e && e.name) || 'Error'}${code}: ${e && e.message}`);
  }

  finish() {
    const ok = this.failed === 0 && this.errors === 0 && this.passed > 0;
    console.log(`SUMMARY ${this.driver}: ${ok ? 'PASS' : 'FAIL'} ` +
      `(${this.passed} checks passed, ${this.failed} failed, ${this.errors} errors)`);
    process.exit(ok ? 0 : 1);
  }
}

export class WorkerStats {
  constructor(worker) {
    this.worker = worker;
    this.reads = 0;
    this.badReads = [];
    this.commits = 0;
    this.rollbacks = 0;
    this.tzChecks = 0;
    this.badTz = [];
    this.done = 0;
  }

  badRead(what, got, want) {
    this.badReads.push(`${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
  }

  tz(where, got, want) {
    this.tzChecks++;
    if (got !== want) this.badTz.push(`${where}: SHOW TimeZone = ${JSON.stringify(got)}, want ${want}`);
  }

  report(rep, zone) {
    const w = this.worker;
    rep.check(this.done === ITERATIONS, `worker ${w} workload`,
      `${this.done}/${ITERATIONS} iterations, ${this.reads} checked reads, ` +
      `${this.commits} commits, ${this.rollbacks} rollbacks`);
    rep.check(this.badReads.length === 0, `worker ${w} read values`,
      this.badReads.length ? `${this.badReads.length} wrong: ${this.badReads.slice(0, 5).join('; ')}`
        : `${this.reads} reads as expected`);
    rep.check(this.badTz.length === 0 && this.tzChecks >= 5, `worker ${w} session TimeZone ${zone}`,
      this.badTz.length ? `${this.badTz.length}/${this.tzChecks} wrong: ${this.badTz.slice(0, 3).join('; ')}`
        : this.tzChecks < 5 ? `only ${this.tzChecks} checks: the worker stopped early`
          : `${this.tzChecks} checks, always its own zone`);
  }
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Resolves to 'timeout' if p has not settled within ms.
export function within(p, ms) {
  let timer;
  return Promise.race([
    p.finally(() => clearTimeout(timer)),
    new Promise((resolve) => { timer = setTimeout(() => resolve('timeout'), ms); }),
  ]);
}
