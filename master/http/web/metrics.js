// det's web page: metrics for people: diagnostics hidden, hyperparameters flattened, units on numbers;
// the per-metric charts.
'use strict';

// Metrics named "diag/..." (hashes, checksums) are diagnostics: left out of tables and
// charts unless the "diagnostics" toggle is on.
const isDiag = (k) => String(k).startsWith('diag/');

// What the charts and tables show; a view's toggles change it, and "?diagnostics=1",
// "?log=1", "?metric=NAME", "?sort=COLUMN&dir=-1", "?trials=all|best|selected",
// "?best=N", "?sel=ID,ID", "?logq=TEXT", "?level=info|warning|error", "?follow=0" in the
// address set it.
const prefs = {
  metric: '', log: false, diagnostics: false, sort: { key: 'id', dir: 1 }, scatterHp: '',
  trials: 'all', bestN: 5, selected: [], logq: '', level: '', follow: true,
};

function prefsFrom(params) {
  if (params.has('diagnostics')) prefs.diagnostics = params.get('diagnostics') === '1';
  if (params.has('log')) prefs.log = params.get('log') === '1';
  if (params.has('metric')) prefs.metric = params.get('metric');
  if (params.has('sort')) prefs.sort = { key: params.get('sort'), dir: params.get('dir') === '-1' ? -1 : 1 };
  const mode = params.get('trials');
  prefs.trials = ['all', 'best', 'selected'].includes(mode) ? mode : 'all';
  if (params.has('best')) prefs.bestN = Math.max(1, Math.round(num(params.get('best'))) || 1);
  prefs.selected = (params.get('sel') || '').split(',').filter((s) => /^\d+$/.test(s));
  prefs.logq = params.get('logq') || '';
  prefs.level = params.get('level') || '';
  prefs.follow = params.get('follow') !== '0';
}

const shownMetric = (k) => prefs.diagnostics || !isDiag(k);

// A metric's value: hashes and checksums (integers) in hex, the rest by fmt.
function fmtMetric(name, v) {
  const n = Number(v);
  if (/hash|checksum/i.test(name) && Number.isInteger(n) && n >= 0) return '0x' + n.toString(16);
  return fmt(v);
}

// Milliseconds with a unit and 3 significant digits: "42.1 µs", "12.3 ms", "4.21 s".
function fmtMs(ms) {
  const n = Number(ms);
  if (!Number.isFinite(n)) return esc(ms);
  if (n === 0) return '0 ms';
  const p3 = (x) => String(Number(x.toPrecision(3)));
  if (Math.abs(n) < 1e-3) return `${p3(n * 1e6)} ns`;
  if (Math.abs(n) < 1) return `${p3(n * 1000)} µs`;
  if (Number(n.toPrecision(3)) < 1000) return `${p3(n)} ms`;
  if (Number((n / 1000).toPrecision(3)) < 600) return `${p3(n / 1000)} s`;
  return `${p3(n / 60000)} min`;
}

// A rate with its unit: "2.78 batches/s", "1.23k samples/s".
function fmtRate(v, unit) {
  const n = Number(v);
  if (!Number.isFinite(n)) return esc(v);
  const p3 = (x) => String(Number(x.toPrecision(3)));
  if (Math.abs(n) >= 1e6) return `${p3(n / 1e6)}M ${unit}`;
  if (Math.abs(n) >= 1e4) return `${p3(n / 1e3)}k ${unit}`;
  return `${p3(n)} ${unit}`;
}

// A hyperparameter object flattened: [["optimizer.lr", value], ...] sorted by name.
function flattenHparams(json) {
  let obj;
  try { obj = JSON.parse(json || '{}'); } catch (e) { return []; }
  const out = [];
  const walk = (v, prefix) => {
    if (v && typeof v === 'object' && !Array.isArray(v)) {
      for (const [k, x] of Object.entries(v)) walk(x, prefix ? `${prefix}.${k}` : k);
    } else {
      out.push([prefix, v]);
    }
  };
  if (obj && typeof obj === 'object') walk(obj, '');
  return out.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
}

function fmtHparam(v) {
  if (typeof v === 'number') return fmt(v);
  if (typeof v === 'string') return esc(v);
  return esc(JSON.stringify(v));
}

// The text of top-level key `key` of a YAML document (block or flow style): what follows
// "key:" on its line, then its lines indented by two (its direct members); null when the
// document has no such key.
function yamlSection(yaml, key) {
  const lines = String(yaml || '').split('\n');
  const i = lines.findIndex((l) => l.startsWith(key + ':'));
  if (i < 0) return null;
  let text = lines[i].slice(key.length + 1);
  for (let j = i + 1; j < lines.length && (/^\s/.test(lines[j]) || lines[j] === ''); j++) {
    if (/^\s{2}\S/.test(lines[j]) || /^\s*$/.test(lines[j])) text += '\n' + lines[j];
  }
  return text;
}

// searcher.metric and searcher.smaller_is_better (default true) of an experiment's
// effective config (YAML, block or flow style); null when it names no metric.
function searcherMetric(yaml) {
  const text = yamlSection(yaml, 'searcher');
  if (text === null) return null;
  const m = text.match(/(?:^|[\s{,])metric:\s*["']?([^"',}\s]+)/);
  if (!m) return null;
  const s = text.match(/smaller_is_better:\s*["']?(true|false)/i);
  return { name: m[1], smallerIsBetter: s ? s[1].toLowerCase() === 'true' : true };
}

function bestValue(t, metric) {
  const s = metric && (t.validation_summary || {})[metric.name];
  if (!s || !num(s.count)) return undefined;
  return metric.smallerIsBetter ? Number(s.min) : Number(s.max);
}

function bestTrialId(trials, metric) {
  let best = null, bv;
  for (const t of trials) {
    const v = bestValue(t, metric);
    if (v === undefined || !Number.isFinite(v)) continue;
    if (best === null || (metric.smallerIsBetter ? v < bv : v > bv)) { best = t.id; bv = v; }
  }
  return best;
}

// Keeps the <option>s of `select` equal to `values` (first `labels[0]` as value ""),
// rebuilding only on change so an open picker is not disturbed.
function setOptions(select, values, allLabel) {
  const want = (allLabel !== undefined ? [''] : []).concat(values);
  const have = [...select.options].map((o) => o.value);
  if (want.join('\u0000') === have.join('\u0000')) return;
  const current = select.value;
  select.innerHTML = want.map((v) => `<option value="${esc(v)}">${esc(v === '' ? allLabel : v)}</option>`).join('');
  if (want.includes(current)) select.value = current;
}

// The toolbar of a metric section: metric picker, log scale, diagnostics.
function chartControls() {
  return '<div class="toolbar chart-controls"><label>Metric <select id="metric-pick"><option value="">all metrics</option></select></label>' +
    `<label><input type="checkbox" id="log-scale"${prefs.log ? ' checked' : ''}> log scale</label>` +
    `<label title="also metrics named diag/… (hashes, checksums)"><input type="checkbox" id="diagnostics"${prefs.diagnostics ? ' checked' : ''}> diagnostics</label></div>`;
}

function wireChartControls() {
  $('metric-pick').addEventListener('change', (ev) => { prefs.metric = ev.target.value; refreshNow(); });
  $('log-scale').addEventListener('change', (ev) => { prefs.log = ev.target.checked; refreshNow(); });
  $('diagnostics').addEventListener('change', (ev) => { prefs.diagnostics = ev.target.checked; refreshNow(); });
}

// One chart per metric over the runs [{rows, prefix, color}]: the training and validation
// series of a name on one chart (training solid, validation dashed). Fills the metric
// picker with the names; draws only the picked one when one is picked.
function metricCharts(runs) {
  const names = new Set();
  for (const r of runs) {
    for (const row of r.rows) {
      if (row.group !== 'training' && row.group !== 'validation') continue;
      for (const k of Object.keys(row.values || {})) if (shownMetric(k)) names.add(k);
    }
  }
  const all = [...names].sort();
  const pick = $('metric-pick');
  if (pick) {
    setOptions(pick, all, 'all metrics');
    pick.value = all.includes(prefs.metric) ? prefs.metric : '';
  }
  const chosen = all.includes(prefs.metric) ? [prefs.metric] : all;
  if (!chosen.length) return '<p class="muted">No metrics reported yet.</p>';
  return chosen.map((name) => {
    const series = [];
    for (const r of runs) {
      for (const group of ['training', 'validation']) {
        for (const s of seriesFrom(r.rows, group, (k) => k === name, r.prefix, group === 'validation')) {
          if (r.color) s.color = r.color;
          series.push(s);
        }
      }
    }
    return lineChart(name, series, { log: prefs.log });
  }).join('');
}
