// The demo's report.html in a real browser (Debian's chromium, headless):
// renders from a canned results directory (`hyperpool demo --report-from`),
// loads with no console error and no request beyond the file itself, shows
// a measured and a limit bar with the right numbers for every protocol and
// mode, and no two text labels overlap. Screenshot: OUT/report.png.
//
// usage: node report_test.mjs HYPERPOOL_BINARY OUT_DIR
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { fail, launch, overlappingLabels, watch } from './browser.mjs';

const NAME = 'browser_report_test';
const [binary, out] = process.argv.slice(2);
if (!binary || !out) throw new Error('usage: node report_test.mjs HYPERPOOL_BINARY OUT_DIR');
mkdirSync(out, { recursive: true });
const canned = new URL('./data/demo-results/', import.meta.url).pathname;
execFileSync(binary, ['demo', '--report-from', canned, '--out', out], { stdio: 'inherit' });
const file = join(out, 'report.html');

// The means the chart must show, from the canned demo.csv.
const [header, ...lines] = readFileSync(join(canned, 'demo.csv'), 'utf8').trim().split('\n');
const columns = header.split(',');
const rows = lines.map((l) => Object.fromEntries(l.match(/("[^"]*"|[^,]*)(,|$)/g).slice(0, columns.length)
  .map((f, i) => [columns[i], f.replace(/,$/, '').replace(/^"|"$/g, '')])));
const label = (ms) => (ms >= 100 ? ms.toFixed(0) : ms.toFixed(1));

const { context, close } = await launch();
try {
  const page = await context.newPage();
  const url = pathToFileURL(file).href;
  const problems = watch(page, (u) => u === url);
  await page.goto(url);
  await page.waitForLoadState('load');
  const values = await page.$$eval('svg text.value', (ts) => ts.map((t) => t.textContent));
  for (const r of rows) {
    for (const want of [label(Number(r.mean_ms)), label(Number(r.limit_ms))]) {
      if (!values.includes(want)) fail(NAME, `no bar label ${want} for ${r.protocol} ${r.mode} (labels: ${values})`);
    }
  }
  const modes = await page.$$eval('svg text.mode', (ts) => ts.map((t) => t.textContent));
  if (modes.join(' ') !== 'direct pooled cached direct pooled cached') fail(NAME, `mode labels: ${modes}`);
  const bars = await page.$$eval('svg rect', (rs) => rs.filter((r) => r.getBBox().height > 0).length);
  if (bars < 12) fail(NAME, `${bars} bars drawn, expected 12 (6 measured, 6 limits) and the legend`);
  const tableRows = await page.$$eval('table tbody tr', (trs) => trs.length);
  if (tableRows !== 6) fail(NAME, `${tableRows} table rows, expected 6`);
  const { count, overlaps } = await overlappingLabels(page);
  if (count < 40) fail(NAME, `only ${count} text boxes found`);
  for (const o of overlaps) fail(NAME, `labels overlap: ${o}`);
  await page.screenshot({ path: join(out, 'report.png'), fullPage: true });
  for (const p of problems) fail(NAME, p);
  if (!process.exitCode) console.log(`${NAME}: ok: ${count} labels, none overlapping; screenshot ${join(out, 'report.png')}`);
} finally {
  await close();
}
