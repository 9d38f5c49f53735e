// hyperpool's live dashboard: polls /dashboard.json and redraws. Served by
// the metrics listener from the binary itself; it loads nothing else and
// writes only text nodes (no HTML from the server is ever parsed).
'use strict';

const POLL_MS = Number(new URLSearchParams(location.search).get('interval')) || 1000;
const HISTORY = 60;  // hit-ratio samples kept per database
const history = new Map();  // database name -> [{hits, misses, ratio}]

function el(tag, attrs = {}, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function svgEl(tag, attrs = {}, text) {
  const node = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function fmtSeconds(s) {
  if (s >= 1) return `${+s.toFixed(2)} s`;
  if (s >= 0.001) return `${+(s * 1e3).toFixed(1)} ms`;
  return `${Math.round(s * 1e6)} µs`;
}

function fmtBytes(n) {
  if (n >= 1 << 20) return `${(n / (1 << 20)).toFixed(1)} MiB`;
  if (n >= 1 << 10) return `${(n / (1 << 10)).toFixed(1)} KiB`;
  return `${n} B`;
}

// A tile: label over value; `field` names the JSON number it shows.
function tiles(container, entries) {
  if (container.childElementCount !== entries.length) {
    container.replaceChildren(...entries.map(([label, field]) => {
      const tile = el('div', { class: 'tile', 'data-field': field });
      tile.append(el('span', { class: 'label' }, label), el('span', { class: 'value' }, ''));
      return tile;
    }));
  }
  entries.forEach(([, , value], i) => {
    const v = container.children[i].querySelector('.value');
    const text = String(value);
    if (v.textContent !== text) v.textContent = text;
  });
}

function histogram(container, title, h) {
  const rows = [el('div', { class: 'summary' },
    `${title}: ${h.count} observed, mean ${h.count ? fmtSeconds(h.sum_seconds / h.count) : '-'}`)];
  const max = Math.max(1, ...h.counts);
  // Buckets up to the last one with observations (at least up to 10 ms).
  let last = h.counts.length - 1;
  while (last > 6 && h.counts[last] === 0) last--;
  for (let i = 0; i <= last; i++) {
    const label = i < h.le_seconds.length ? `≤ ${fmtSeconds(h.le_seconds[i])}`
      : `> ${fmtSeconds(h.le_seconds[h.le_seconds.length - 1])}`;
    const bar = el('div', { class: 'bar' });
    bar.style.width = `${(100 * h.counts[i]) / max}%`;
    rows.push(el('div', { class: 'bucket' }, label), el('div', {}, ''), el('div', { class: 'count' }, h.counts[i]));
    rows[rows.length - 2].append(bar);
  }
  container.replaceChildren(...rows);
}

// The hit ratio of each poll interval (hits / (hits + misses) of the
// deltas), as a line over the last HISTORY polls.
function sparkline(svg, samples) {
  // User units are CSS pixels (the box's own size), so the labels keep their shape.
  const w = Math.max(120, Math.round(svg.getBoundingClientRect().width) || 400), h = 90;
  const left = 34, top = 6, bottom = 6;
  svg.setAttribute('viewBox', `0 0 ${w} ${h}`);
  const nodes = [];
  for (const [v, label] of [[1, '100%'], [0.5, '50%'], [0, '0%']]) {
    const y = top + (1 - v) * (h - top - bottom);
    nodes.push(svgEl('line', { x1: left, x2: w, y1: y, y2: y, class: 'grid' }));
    nodes.push(svgEl('text', { x: left - 4, y: y + 3, 'text-anchor': 'end' }, label));
  }
  const points = [];
  samples.forEach((s, i) => {
    if (s.ratio === null) return;
    const x = left + ((w - left) * i) / (HISTORY - 1);
    points.push(`${x.toFixed(1)},${(top + (1 - s.ratio) * (h - top - bottom)).toFixed(1)}`);
  });
  if (points.length) nodes.push(svgEl('polyline', { points: points.join(' '), class: 'line' }));
  svg.replaceChildren(...nodes);
}

function databaseCard(name) {
  const id = `db-${name || 'default'}`;
  let card = document.getElementById(id);
  if (card) return card;
  card = el('section', { class: 'card', id, 'data-database': name });
  card.append(el('h2', {}, name ? `Database ${name}` : 'Endpoint'));
  card.append(el('h3', {}, 'Pool'), el('div', { class: 'tiles pool' }));
  card.append(el('h3', {}, 'Pins'), el('div', { class: 'tiles pins' }));
  card.append(el('h3', {}, 'Query cache'), el('div', { class: 'tiles cache' }));
  const columns = el('div', { class: 'columns' });
  const ratio = el('div');
  ratio.append(el('h3', {}, 'Endpoint cache hit ratio per interval'), svgEl('svg', { class: 'spark' }));
  const latency = el('div');
  latency.append(el('h3', {}, 'Latency'), el('div', { class: 'histogram transaction' }),
    el('div', { class: 'histogram acquire' }));
  columns.append(ratio, latency);
  card.append(columns);
  card.append(el('h3', {}, 'Top query fingerprints and cache decisions'));
  const table = el('table', { class: 'top' });
  const head = el('tr');
  for (const [label, width] of [['fingerprint', '150px'], ['decision', '130px'], ['count', '70px'], ['query', '']]) {
    const th = el('th', {}, label);
    if (width) th.style.width = width;
    head.append(th);
  }
  table.append(el('thead'), el('tbody'));
  table.tHead.append(head);
  card.append(table);
  document.getElementById('databases').append(card);
  return card;
}

function renderDatabase(db) {
  const card = databaseCard(db.name);
  const p = db.pool;
  tiles(card.querySelector('.pool'), [
    ['active (origin)', 'pool.active', p.active], ['idle (origin)', 'pool.idle', p.idle],
    ['max size', 'pool.max', p.max], ['waiting', 'pool.waiting', p.waiting],
    ['longest wait', 'pool.max_wait_seconds', fmtSeconds(p.max_wait_seconds)],
    ['client links', 'sessions', db.sessions], ['transactions', 'transactions', db.transactions],
    ['queries', 'queries', db.queries], ['acquire timeouts', 'pool.acquire_timeouts', p.acquire_timeouts],
    ['origin RTT', 'origin_rtt_seconds', db.origin_rtt_seconds ? fmtSeconds(db.origin_rtt_seconds) : '-'],
    ['paused', 'pool.paused', p.paused ? 'yes' : 'no'],
  ]);
  const pins = db.pins;
  tiles(card.querySelector('.pins'), [
    ['pinned sessions', 'pins.pinned_sessions', pins.pinned_sessions],
    ['pinned conns', 'pins.pinned_connections', pins.pinned_connections],
    ['refused', 'pins.rejected', pins.rejected], ['prepared SQL', 'pins.prepared_sql', pins.prepared_sql],
    ['temp table', 'pins.temp_table', pins.temp_table], ['advisory lock', 'pins.advisory_lock', pins.advisory_lock],
    ['LISTEN', 'pins.listen', pins.listen], ['WITH HOLD', 'pins.with_hold_cursor', pins.with_hold_cursor],
    ['SET ROLE', 'pins.set_role', pins.set_role],
  ]);
  const c = db.cache;
  const lookups = c.hits + c.stale_hits + c.misses;
  tiles(card.querySelector('.cache'), [
    ['hits', 'cache.hits', c.hits], ['stale hits', 'cache.stale_hits', c.stale_hits],
    ['misses', 'cache.misses', c.misses],
    ['hit ratio', 'cache.ratio', lookups ? `${((100 * (c.hits + c.stale_hits)) / lookups).toFixed(1)}%` : '-'],
    ['invalidations', 'cache.invalidations', c.invalidations], ['uncacheable', 'cache.uncacheable', c.uncacheable],
    ['entries', 'cache.entries', c.entries], ['bytes', 'cache.bytes', fmtBytes(c.bytes)],
    ['evictions', 'cache.evictions', c.evictions],
  ]);
  const samples = history.get(db.name) || [];
  const prev = samples[samples.length - 1];
  const hits = c.hits + c.stale_hits;
  let ratio = null;
  if (prev) {
    const dh = hits - prev.hits, dm = c.misses - prev.misses;
    ratio = dh + dm > 0 ? dh / (dh + dm) : null;
  }
  samples.push({ hits, misses: c.misses, ratio });
  while (samples.length > HISTORY) samples.shift();
  history.set(db.name, samples);
  sparkline(card.querySelector('svg.spark'), samples);
  histogram(card.querySelector('.histogram.transaction'), 'Transactions at the Endpoint', db.histograms.transaction);
  histogram(card.querySelector('.histogram.acquire'), 'Wait for an origin connection', db.histograms.acquire_wait);
  const body = card.querySelector('table.top tbody');
  body.replaceChildren(...db.top_queries.map((q) => {
    const tr = el('tr');
    tr.append(el('td', {}, q.fingerprint), el('td', {}, q.decision), el('td', { class: 'num' }, q.count),
      el('td', { title: q.sample }, q.sample));
    return tr;
  }));
}

function render(data) {
  document.getElementById('role').textContent = data.role || 'hyperpool';
  document.getElementById('draining').hidden = !data.draining;
  const link = document.getElementById('link');
  link.replaceChildren(...(data.link.length ? data.link : ['(not reported by this process)']).map((l) => el('li', {}, l)));
  const clientSection = document.getElementById('client-section');
  clientSection.hidden = !data.client;
  if (data.client) {
    const cl = data.client;
    const entries = [['open', 'client.connections', cl.connections], ['accepted', 'client.accepted', cl.accepted]];
    for (const [state, n] of Object.entries(cl.states)) entries.push([state, `client.states.${state}`, n]);
    entries.push(['received', 'client.bytes_received', fmtBytes(cl.bytes_received)],
      ['sent', 'client.bytes_sent', fmtBytes(cl.bytes_sent)]);
    if (cl.cache) {
      entries.push(['Client cache hits', 'client.cache.hits', cl.cache.hits],
        ['Client cache entries', 'client.cache.entries', cl.cache.entries]);
    }
    tiles(document.getElementById('client'), entries);
    histogram(document.querySelector('#client-section .histogram.login'), 'Logins (accept to ReadyForQuery)',
      cl.histograms.login);
  }
  for (const db of data.databases) renderDatabase(db);
}

async function poll() {
  const status = document.getElementById('status');
  try {
    const response = await fetch('/dashboard.json', { cache: 'no-store' });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    render(await response.json());
    status.textContent = `updated ${new Date().toLocaleTimeString()}`;
    document.body.dataset.polls = String(Number(document.body.dataset.polls || 0) + 1);
  } catch (e) {
    status.textContent = `not updated: ${e.message}`;
  }
  setTimeout(poll, POLL_MS);
}

poll();
