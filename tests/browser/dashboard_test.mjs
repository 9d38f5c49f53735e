// The live dashboard of `hyperpool serve --metrics-listen` in a real browser
// (Debian's chromium, headless), under load from pgbench: the page loads with
// no console error and fetches nothing beyond the metrics listener; its
// transaction and cache counters rise while pgbench runs, and its login
// histogram by pgbench's clients; once the load has stopped its numbers
// (tiles, transaction and login histograms) equal /metrics'; no two text
// labels overlap.
// Screenshot: OUT/dashboard.png.
//
// usage: node dashboard_test.mjs METRICS_HOST:PORT PGBENCH_ARGS_JSON OUT_DIR
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { fail, launch, overlappingLabels, watch } from './browser.mjs';

const NAME = 'browser_dashboard_test';
const [metricsAddress, pgbenchJson, out] = process.argv.slice(2);
if (!out) throw new Error('usage: node dashboard_test.mjs METRICS_HOST:PORT PGBENCH_ARGS_JSON OUT_DIR');
mkdirSync(out, { recursive: true });
const base = `http://${metricsAddress}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
// pgbench's -c: each of its clients logs in once (at least).
const pgbenchArgs = JSON.parse(pgbenchJson);
const PGBENCH_CLIENTS = Number(pgbenchArgs[pgbenchArgs.indexOf('-c') + 1]);

// Polls `probe` until it returns a truthy value or `ms` pass.
async function until(what, ms, probe) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(100);
  }
}

// /metrics as {"name{labels}": value}.
async function metrics() {
  const text = await (await fetch(`${base}/metrics`)).text();
  const samples = {};
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const cut = line.lastIndexOf(' ');
    samples[line.slice(0, cut)] = Number(line.slice(cut + 1));
  }
  return samples;
}

// The dashboard's tiles: field name -> text shown, for the one database.
const tiles = (page) => page.$$eval('[data-database] [data-field], #client [data-field]', (ts) =>
  Object.fromEntries(ts.map((t) => [t.closest('#client') ? `client:${t.dataset.field}` : t.dataset.field,
    t.querySelector('.value').textContent])));
const polls = (page) => page.evaluate(() => Number(document.body.dataset.polls || 0));
// Observations a histogram of the page shows (the sum of its bucket counts).
const histogramCount = (page, which) =>
  page.$$eval(`.histogram.${which} .count`, (cs) => cs.reduce((s, c) => s + Number(c.textContent), 0));

// Which tile shows which /metrics sample.
const MATCH = {
  'transactions': 'hyperpool_transactions_total',
  'queries': 'hyperpool_queries_total',
  'pool.active': 'hyperpool_pool_connections{state="active"}',
  'pool.idle': 'hyperpool_pool_connections{state="idle"}',
  'pool.max': 'hyperpool_pool_max_connections',
  'pool.waiting': 'hyperpool_pool_waiting',
  'sessions': 'hyperpool_endpoint_sessions',
  'pins.pinned_sessions': 'hyperpool_pinned_sessions',
  'cache.hits': 'hyperpool_cache_hits_total{tier="endpoint"}',
  'cache.misses': 'hyperpool_cache_misses_total{tier="endpoint"}',
  'cache.invalidations': 'hyperpool_cache_invalidations_total{tier="endpoint"}',
  'cache.entries': 'hyperpool_cache_entries{tier="endpoint"}',
  'client:client.connections': 'hyperpool_client_connections',
};

function mismatches(shown, m) {
  const wrong = [];
  for (const [field, sample] of Object.entries(MATCH)) {
    if (!(sample in m)) wrong.push(`/metrics has no ${sample}`);
    else if (shown[field] !== String(m[sample])) wrong.push(`${field} shows ${shown[field]}, /metrics ${sample} ${m[sample]}`);
  }
  return wrong;
}

const { context, close } = await launch();
let pgbench;
try {
  const page = await context.newPage();
  const problems = watch(page, (u) => u.startsWith(`${base}/`));
  await page.goto(`${base}/dashboard?interval=250`);
  await until('the first poll', 10000, async () => (await polls(page)) >= 1);
  const before = await tiles(page);
  const loginsBefore = await histogramCount(page, 'login');

  // Load: pgbench through serve; the counters must move on the page.
  pgbench = spawn('pgbench', pgbenchArgs, { stdio: ['ignore', 'pipe', 'pipe'] });
  let pgbenchOutput = '';
  pgbench.stdout.on('data', (d) => { pgbenchOutput += d; });
  pgbench.stderr.on('data', (d) => { pgbenchOutput += d; });
  const finished = new Promise((resolve) => pgbench.on('exit', (code) => resolve(code)));
  // Hits of either tier: the Client's answers repeats before the Endpoint sees them.
  const during = await until('transactions and cache hits rising on the page', 20000, async () => {
    const t = await tiles(page);
    const hits = Number(t['cache.hits']) + Number(t['client:client.cache.hits'] || 0);
    return Number(t.transactions) > Number(before.transactions) + 100 && hits > 0 ? t : null;
  });
  const code = await finished;
  pgbench = null;
  if (code !== 0) throw new Error(`pgbench exited with ${code}:\n${pgbenchOutput}`);

  // Quiet again: /metrics stops moving, then the page must show its numbers.
  let settled = await metrics();
  await until('/metrics to settle', 10000, async () => {
    await sleep(300);
    const now = await metrics();
    const same = now.hyperpool_transactions_total === settled.hyperpool_transactions_total &&
      now['hyperpool_pool_connections{state="active"}'] === 0;
    settled = now;
    return same;
  });
  let wrong = [];
  await until('the page to equal /metrics', 10000, async () => {
    const p = await polls(page);
    await until('two more polls', 5000, async () => (await polls(page)) >= p + 2);
    wrong = mismatches(await tiles(page), await metrics());
    return wrong.length === 0;
  }).catch(() => { for (const w of wrong) fail(NAME, w); });
  const after = await tiles(page);
  if (Number(after.transactions) <= Number(during.transactions)) fail(NAME, 'transactions did not rise further');
  const topRows = await page.$$eval('table.top tbody tr', (trs) => trs.map((tr) => tr.textContent));
  if (!topRows.some((r) => /select v from t where id/i.test(r))) fail(NAME, `no top fingerprint for the load: ${topRows}`);
  const ratioLine = await page.$('svg.spark polyline');
  if (!ratioLine) fail(NAME, 'no hit-ratio line drawn');
  const histogramRows = await histogramCount(page, 'transaction');
  if (histogramRows !== settled['hyperpool_transaction_duration_seconds_count']) {
    fail(NAME, `transaction histogram shows ${histogramRows}, /metrics count ${settled['hyperpool_transaction_duration_seconds_count']}`);
  }
  // pgbench's clients each logged in to the Client: the login histogram rose
  // by at least their number and shows what /metrics counts.
  const logins = await histogramCount(page, 'login');
  const loginsMetric = settled['hyperpool_client_login_duration_seconds_count'];
  if (logins !== loginsMetric) fail(NAME, `login histogram shows ${logins}, /metrics count ${loginsMetric}`);
  if (logins < loginsBefore + PGBENCH_CLIENTS) {
    fail(NAME, `login histogram rose from ${loginsBefore} to ${logins}, less than pgbench's ${PGBENCH_CLIENTS} clients`);
  }
  const { count, overlaps } = await overlappingLabels(page);
  if (count < 60) fail(NAME, `only ${count} text boxes found`);
  for (const o of overlaps) fail(NAME, `labels overlap: ${o}`);
  await page.screenshot({ path: join(out, 'dashboard.png'), fullPage: true });
  for (const p of problems) fail(NAME, p);
  if (!process.exitCode) {
    console.log(`${NAME}: ok: transactions ${before.transactions} -> ${during.transactions} (under load) -> ` +
      `${after.transactions}, cache hits ${after['cache.hits']}, logins ${loginsBefore} -> ${logins}, equal to /metrics; ${count} labels, none overlapping; ` +
      `screenshot ${join(out, 'dashboard.png')}`);
  }
} catch (e) {
  fail(NAME, e.message);
} finally {
  if (pgbench) pgbench.kill('SIGKILL');
  await close();
}
