// Shared by the browser tests: Debian's chromium driven headless by
// playwright-core (pinned in tests/drivers/package.json, installed by
// scripts/setup.sh), console-error collection and the label-overlap check.
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const require = createRequire(new URL('../drivers/package.json', import.meta.url));
const { chromium } = require('playwright-core');

export const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';

// A fresh browser with its own, new profile directory (playwright passes it
// as --user-data-dir; removed by close()). `context.newPage()` opens a tab.
export async function launch() {
  const profile = mkdtempSync(join(tmpdir(), 'hp-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 1000 },
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  return {
    context,
    async close() {
      await context.close();
      rmSync(profile, { recursive: true, force: true });
    },
  };
}

// Collects console errors, page errors and failed requests, and any request
// for a URL `allowed` refuses (the pages must fetch nothing from elsewhere).
export function watch(page, allowed) {
  const problems = [];
  page.on('console', (m) => { if (m.type() === 'error') problems.push(`console error: ${m.text()}`); });
  page.on('pageerror', (e) => problems.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => problems.push(`request failed: ${r.url()} ${r.failure()?.errorText}`));
  page.on('request', (r) => { if (!allowed(r.url())) problems.push(`request outside the page's origin: ${r.url()}`); });
  return problems;
}

// Every visible text on the page (HTML and SVG) with its box, clipped by
// ancestors that hide overflow; then the pairs whose boxes intersect by more
// than `tolerance` pixels each way.
export async function overlappingLabels(page, tolerance = 0.5) {
  return page.evaluate((tol) => {
    const skip = new Set(['SCRIPT', 'STYLE', 'TITLE', 'HEAD', 'title']);
    const boxes = [];
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const text = node.textContent.trim();
      const parent = node.parentElement;
      if (!text || !parent || skip.has(parent.tagName)) continue;
      let rects;
      if (parent instanceof SVGElement) {
        rects = [parent.getBoundingClientRect()];
      } else {
        const range = document.createRange();
        range.selectNodeContents(node);
        rects = [...range.getClientRects()];
      }
      for (let r of rects) {
        let box = { left: r.left, top: r.top, right: r.right, bottom: r.bottom };
        for (let a = parent; a && a !== document.documentElement; a = a.parentElement) {
          const style = getComputedStyle(a);
          if (style.visibility === 'hidden' || style.display === 'none') { box = null; break; }
          if (style.overflowX !== 'visible' || style.overflowY !== 'visible') {
            const c = a.getBoundingClientRect();
            box = { left: Math.max(box.left, c.left), top: Math.max(box.top, c.top),
              right: Math.min(box.right, c.right), bottom: Math.min(box.bottom, c.bottom) };
          }
        }
        if (box && box.right - box.left > 0.5 && box.bottom - box.top > 0.5) boxes.push({ text, ...box });
      }
    }
    const overlaps = [];
    for (let i = 0; i < boxes.length; i++) {
      for (let j = i + 1; j < boxes.length; j++) {
        const a = boxes[i], b = boxes[j];
        const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
        const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
        if (w > tol && h > tol) overlaps.push(`"${a.text}" and "${b.text}" (${w.toFixed(1)} x ${h.toFixed(1)} px)`);
      }
    }
    return { count: boxes.length, overlaps };
  }, tolerance);
}

export function fail(name, message) {
  console.error(`${name}: FAIL: ${message}`);
  process.exitCode = 1;
}
