// det's web page: a client of the master's REST API (/api/v1/). No libraries; plots are
// SVG drawn here. Views: #/ (cluster), #/experiments, #/experiments/ID, #/trials/ID.
// Every view refreshes itself every few seconds; trial logs follow with long polls.
'use strict';

const POLL_MS = 3000;
const TOKEN_KEY = 'det_token';
const COLORS = ['#2f6fdf', '#d9480f', '#2b8a3e', '#862e9c', '#c2255c', '#0b7285', '#5c940d', '#e67700'];

let token = localStorage.getItem(TOKEN_KEY) || '';
let generation = 0;      // bumps on every navigation; stale loops stop
let refreshTimer = null;
let currentRefresh = null;

// ---------------------------------------------------------------------------------------
// Helpers.

function esc(value) {
  return String(value === undefined || value === null ? '' : value)
    .replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;').replace(/'/g, '&#39;');
}

function num(v) {
  const n = Number(v);
  return Number.isFinite(n) ? n : 0;
}

// A number for people: integers whole (below 1e9), others with 4 significant digits.
function fmt(v) {
  const n = Number(v);
  if (!Number.isFinite(n)) return esc(v);
  if (n === 0) return '0';
  const a = Math.abs(n);
  if (Number.isInteger(n) && a < 1e9) return String(n);
  const r = Number(n.toPrecision(4));
  if (a >= 1e9 || a < 1e-4) return r.toExponential();
  return String(r);
}

function stateName(s) {
  return String(s || '').replace(/^STATE_/, '');
}

function stateBadge(s) {
  const name = stateName(s) || 'UNKNOWN';
  return `<span class="state state-${esc(name.toLowerCase())}">${esc(name)}</span>`;
}

function when(ms) {
  const t = num(ms);
  if (!t) return '';
  return new Date(t).toLocaleString();
}

function ago(ms) {
  const t = num(ms);
  if (!t) return '';
  const s = Math.max(0, Math.round((Date.now() - t) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

function duration(startMs, endMs) {
  const start = num(startMs);
  if (!start) return '';
  const end = num(endMs) || Date.now();
  let s = Math.max(0, Math.round((end - start) / 1000));
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  const m = Math.floor(s / 60);
  s -= m * 60;
  return h ? `${h}h ${m}m` : m ? `${m}m ${s}s` : `${s}s`;
}

function $(id) {
  return document.getElementById(id);
}

function setHtml(id, html) {
  const el = $(id);
  if (el) el.innerHTML = html;
}

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// Calls the REST API; resolves to the parsed JSON, rejects with an ApiError.
async function api(path, options = {}) {
  const headers = Object.assign({}, options.headers || {});
  if (token) headers['Authorization'] = 'Bearer ' + token;
  if (options.body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch('/api/v1' + path, {
    method: options.method || 'GET',
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  let body = null;
  try {
    body = await res.json();
  } catch (e) {
    body = null;
  }
  if (!res.ok) {
    const err = new ApiError(res.status, body && body.code, (body && body.message) || res.statusText);
    if (res.status === 401 && !path.startsWith('/auth/login')) {
      showLogin(token ? 'Your session has ended: log in again.' : '');
    }
    throw err;
  }
  return body;
}

function setStatus(text, isError) {
  const el = $('status');
  if (!el) return;
  el.textContent = text;
  el.className = isError ? 'error' : 'muted';
}

// ---------------------------------------------------------------------------------------
// Views.

function agentSlots(a) {
  return (a.slots || []).map((s) => {
    const cls = s.allocation_id ? 'slot used' : (!a.enabled || !a.connected) ? 'slot off' : 'slot';
    const tip = `${s.id} ${s.type}${s.device_name ? ' ' + s.device_name : ''}${s.allocation_id ? ' — ' + s.allocation_id : ''}`;
    return `<span class="${cls}" title="${esc(tip)}"></span>`;
  }).join('');
}

function agentsTable(agents) {
  if (!agents.length) return '<p class="muted">No agents have joined.</p>';
  let h = '<table id="agents-table"><thead><tr><th>Agent</th><th>Host</th><th>Pool</th><th>State</th>' +
    '<th class="num">Slots used</th><th>Slots</th><th>Utilisation</th><th>Last heartbeat</th></tr></thead><tbody>';
  for (const a of agents) {
    const total = (a.slots || []).length;
    const used = (a.slots || []).filter((s) => s.allocation_id).length;
    const conn = a.connected ? 'connected' : 'disconnected';
    const en = a.enabled ? 'enabled' : 'disabled';
    h += `<tr class="agent-row" data-agent="${esc(a.id)}"><td>${esc(a.id)}</td><td>${esc(a.hostname)}</td>` +
      `<td>${esc(a.resource_pool)}</td>` +
      `<td><span class="state state-${conn}">${conn}</span> <span class="state state-${en}">${en}</span></td>` +
      `<td class="num slots-used">${used} / ${total}</td><td>${agentSlots(a)}</td>` +
      `<td><progress max="${Math.max(1, total)}" value="${used}"></progress> ${total ? Math.round((100 * used) / total) : 0}%</td>` +
      `<td>${esc(ago(a.last_heartbeat_ms))}</td></tr>`;
  }
  return h + '</tbody></table>';
}

function jobsTable(jobs) {
  if (!jobs.length) return '<p class="muted">The queue is empty.</p>';
  let h = '<table id="jobs-table"><thead><tr><th>#</th><th>Experiment</th><th class="num">Priority</th><th>Pool</th>' +
    '<th>State</th><th class="num">Slots / trial</th><th class="num">Queued</th><th class="num">Running</th><th>Why waiting</th></tr></thead><tbody>';
  jobs.forEach((j, i) => {
    h += `<tr><td>${i + 1}</td><td><a href="#/experiments/${esc(j.experiment_id)}">${esc(j.experiment_id)} ${esc(j.name)}</a></td>` +
      `<td class="num">${esc(j.priority)}</td><td>${esc(j.resource_pool)}</td><td>${stateBadge(j.state)}</td>` +
      `<td class="num">${esc(j.slots_per_trial)}</td><td class="num">${esc(j.queued_trials)}</td>` +
      `<td class="num">${esc(j.running_trials)}</td><td class="reason">${esc(j.reason)}</td></tr>`;
  });
  return h + '</tbody></table>';
}

function experimentsTable(experiments) {
  if (!experiments.length) return '<p class="muted">No experiments.</p>';
  let h = '<table id="experiments-table"><thead><tr><th class="num">ID</th><th>Owner</th><th>Name</th><th>State</th><th>Progress</th>' +
    '<th class="num">Trials</th><th>Pool</th><th>Started</th><th>Duration</th></tr></thead><tbody>';
  for (const e of experiments) {
    const p = num(e.progress);
    h += `<tr class="experiment-row" data-id="${esc(e.id)}"><td class="num">${esc(e.id)}</td>` +
      `<td class="experiment-owner">${esc(e.owner)}</td>` +
      `<td class="experiment-name"><a href="#/experiments/${esc(e.id)}">${esc(e.name)}</a></td>` +
      `<td class="experiment-state">${stateBadge(e.state)}</td>` +
      `<td><progress max="1" value="${p}"></progress> ${Math.round(p * 100)}%</td>` +
      `<td class="num">${esc(e.num_trials)}</td><td>${esc(e.resource_pool)}</td>` +
      `<td>${esc(when(e.start_time_ms))}</td><td>${esc(duration(e.start_time_ms, e.end_time_ms))}</td></tr>`;
  }
  return h + '</tbody></table>';
}

function card(label, value, id) {
  return `<div class="card" id="${id}"><div class="value">${value}</div><div class="label">${esc(label)}</div></div>`;
}

async function overview() {
  $('view').innerHTML =
    '<h1>Cluster</h1><div class="cards" id="cards"></div>' +
    '<h2>Agents</h2><div id="agents"></div>' +
    '<h2>Resource pools</h2><div id="pools"></div>' +
    '<h2>Job queue</h2><div id="jobs"></div>' +
    '<h2>Recent experiments <a class="muted" href="#/experiments">all</a></h2><div id="experiments"></div>';
  return async () => {
    const [stats, agents, pools, jobs, exps] = await Promise.all([
      api('/master/stats'), api('/agents'), api('/resource-pools'), api('/jobs'),
      api('/experiments'),
    ]);
    const slots = num(stats.slots), used = num(stats.slots_used);
    setHtml('cards',
      card('Agents connected', `${num(stats.agents_connected)} / ${num(stats.agents)}`, 'card-agents') +
      card('Slots in use', `${used} / ${slots}`, 'card-slots') +
      card('Utilisation', `${slots ? Math.round((100 * used) / slots) : 0}%`, 'card-utilisation') +
      card('Running trials', num(stats.trials_running), 'card-running') +
      card('Queued trials', num(stats.trials_queued), 'card-queued') +
      card('Active experiments', num(stats.experiments_active), 'card-active'));
    setHtml('agents', agentsTable(agents.agents || []));
    let ph = '<table><thead><tr><th>Pool</th><th class="num">Agents</th><th class="num">Slots used</th>' +
      '<th>Utilisation</th><th class="num">Queued trials</th><th>Preemption</th></tr></thead><tbody>';
    for (const p of pools.pools || []) {
      const s = num(p.slots), u = num(p.slots_used);
      ph += `<tr><td>${esc(p.name)}</td><td class="num">${num(p.connected_agents)} / ${num(p.agents)}</td>` +
        `<td class="num">${u} / ${s}</td><td><progress max="${Math.max(1, s)}" value="${u}"></progress></td>` +
        `<td class="num">${num(p.queued_trials)}</td><td>${p.preemption ? 'on' : 'off'}</td></tr>`;
    }
    setHtml('pools', ph + '</tbody></table>');
    setHtml('jobs', jobsTable(jobs.jobs || []));
    const list = (exps.experiments || []).slice().reverse().slice(0, 20);
    setHtml('experiments', experimentsTable(list));
  };
}

async function experimentList(params) {
  const limit = 50;
  let offset = num(params.get('offset'));
  $('view').innerHTML =
    '<h1>Experiments</h1><div class="toolbar">' +
    '<label>State <select id="f-state"><option value="">any</option>' +
    ['ACTIVE', 'PAUSED', 'STOPPING', 'COMPLETED', 'CANCELED', 'ERROR'].map((s) => `<option>${s}</option>`).join('') +
    '</select></label> <label>Name <input id="f-name" placeholder="contains"></label>' +
    '<button id="f-prev">Previous</button><button id="f-next">Next</button><span id="f-count" class="muted"></span></div>' +
    '<div id="experiments"></div>';
  const state = $('f-state'), name = $('f-name');
  const reload = () => refreshNow();
  state.addEventListener('change', () => { offset = 0; reload(); });
  name.addEventListener('input', () => { offset = 0; reload(); });
  $('f-prev').addEventListener('click', () => { offset = Math.max(0, offset - limit); reload(); });
  $('f-next').addEventListener('click', () => { offset += limit; reload(); });
  return async () => {
    const q = new URLSearchParams({ limit, offset });
    if (state.value) q.set('states', state.value);
    if (name.value) q.set('name', name.value);
    const r = await api('/experiments?' + q.toString());
    const total = num(r.total);
    if (offset >= total && total > 0) offset = Math.floor((total - 1) / limit) * limit;
    setHtml('experiments', experimentsTable(r.experiments || []));
    $('f-count').textContent = `${total ? offset + 1 : 0}–${offset + (r.experiments || []).length} of ${total}`;
  };
}

function kv(rows) {
  return '<table class="kv"><tbody>' +
    rows.filter(([, v]) => v !== undefined && v !== null && v !== '').map(([k, v]) => `<tr><th>${esc(k)}</th><td>${v}</td></tr>`).join('') +
    '</tbody></table>';
}

// ---------------------------------------------------------------------------------------
// Metrics for people: diagnostics hidden, hyperparameters flattened, units on numbers.

// Metrics named "diag/..." (hashes, checksums) are diagnostics: left out of tables and
// charts unless the "diagnostics" toggle is on.
const isDiag = (k) => String(k).startsWith('diag/');

// What the charts and tables show; a view's toggles change it, and "?diagnostics=1",
// "?log=1", "?metric=NAME", "?sort=COLUMN&dir=-1" in the address set it.
const prefs = { metric: '', log: false, diagnostics: false, sort: { key: 'id', dir: 1 }, scatterHp: '' };

function prefsFrom(params) {
  if (params.has('diagnostics')) prefs.diagnostics = params.get('diagnostics') === '1';
  if (params.has('log')) prefs.log = params.get('log') === '1';
  if (params.has('metric')) prefs.metric = params.get('metric');
  if (params.has('sort')) prefs.sort = { key: params.get('sort'), dir: params.get('dir') === '-1' ? -1 : 1 };
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

// searcher.metric and searcher.smaller_is_better (default true) of an experiment's
// effective config (YAML, block or flow style); null when it names no metric.
function searcherMetric(yaml) {
  const lines = String(yaml || '').split('\n');
  const i = lines.findIndex((l) => /^searcher:/.test(l));
  if (i < 0) return null;
  let text = lines[i].slice('searcher:'.length);
  for (let j = i + 1; j < lines.length && (/^\s/.test(lines[j]) || lines[j] === ''); j++) {
    if (/^\s{2}\S/.test(lines[j]) || /^\s*$/.test(lines[j])) text += '\n' + lines[j];
  }
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

// ---------------------------------------------------------------------------------------
// Experiment.

const ENDED = ['COMPLETED', 'CANCELED', 'ERROR', 'DELETED'];

// The actions valid in an experiment's state.
function validActions(state) {
  const s = stateName(state);
  if (ENDED.includes(s)) return [];
  if (s === 'ACTIVE') return ['pause', 'kill'];
  if (s === 'PAUSED') return ['activate', 'kill'];
  return ['kill'];
}

// The columns of the trial table: {key, label, num, sort(t), html(t)}.
function trialColumns(trials, metric, best) {
  const hps = new Set(), others = new Set();
  let anyStopped = false, anyWaiting = false;
  for (const t of trials) {
    for (const [k] of flattenHparams(t.hparams_json)) hps.add(k);
    for (const k of Object.keys(t.validation_summary || {})) {
      if (shownMetric(k) && !(metric && k === metric.name)) others.add(k);
    }
    if (t.search && t.search.stopped_early) anyStopped = true;
    if (t.pending_reason || t.error) anyWaiting = true;
  }
  const hpOf = (t, k) => { const e = flattenHparams(t.hparams_json).find(([n]) => n === k); return e ? e[1] : undefined; };
  const cols = [
    { key: 'id', label: 'Trial', num: true, sort: (t) => num(t.id),
      html: (t) => `<a href="#/trials/${esc(t.id)}">${esc(t.id)}</a>${best !== null && t.id === best ? ' <span class="best-mark" title="best trial by the searcher metric">★ best</span>' : ''}` },
    { key: 'state', label: 'State', sort: (t) => stateName(t.state), html: (t) => stateBadge(t.state) },
    { key: 'batches', label: 'Batches', num: true, sort: (t) => num(t.total_batches), html: (t) => `${esc(t.total_batches)} / ${esc(t.target_batches)}` },
    { key: 'restarts', label: 'Restarts', num: true, sort: (t) => num(t.restarts), html: (t) => esc(t.restarts) },
  ];
  for (const k of [...hps].sort()) {
    cols.push({ key: 'hp:' + k, label: k, num: true, hp: true, sort: (t) => hpOf(t, k), html: (t) => { const v = hpOf(t, k); return v === undefined ? '' : fmtHparam(v); } });
  }
  if (metric) {
    cols.push({ key: 'best', label: `best ${metric.name} (${metric.smallerIsBetter ? 'min' : 'max'})`, num: true, metric: true,
      sort: (t) => bestValue(t, metric), html: (t) => { const v = bestValue(t, metric); return v === undefined ? '' : fmtMetric(metric.name, v); } });
  }
  if (anyStopped) {
    cols.push({ key: 'stopped', label: 'Early stop', sort: (t) => (t.search && t.search.stopped_early ? t.search.stop_reason || 'yes' : ''),
      html: (t) => (t.search && t.search.stopped_early ? `<span class="reason">${esc(t.search.stop_reason || 'stopped early')}</span>` : '') });
  }
  for (const k of [...others].sort()) {
    cols.push({ key: 'm:' + k, label: `${k} (last)`, num: true, sort: (t) => { const s = (t.validation_summary || {})[k]; return s ? Number(s.last) : undefined; },
      html: (t) => { const s = (t.validation_summary || {})[k]; return s ? fmtMetric(k, s.last) : ''; } });
  }
  if (anyWaiting) {
    cols.push({ key: 'why', label: 'Waiting because / error', sort: (t) => t.pending_reason || t.error || '',
      html: (t) => `<span class="reason">${esc(t.pending_reason)}</span>${t.error ? `<span class="error">${esc(t.error)}</span>` : ''}` });
  }
  return cols;
}

function compareValues(a, b) {
  const missA = a === undefined || a === null || a === '', missB = b === undefined || b === null || b === '';
  if (missA || missB) return missA === missB ? 0 : missA ? 1 : -1;  // missing last
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  return String(a).localeCompare(String(b), undefined, { numeric: true });
}

function trialsTable(trials, metric, best) {
  const cols = trialColumns(trials, metric, best);
  const col = cols.find((c) => c.key === prefs.sort.key) || cols[0];
  const dir = col.key === prefs.sort.key ? prefs.sort.dir : 1;
  const sorted = trials.slice().sort((a, b) => {
    const va = col.sort(a), vb = col.sort(b);
    const missing = va === undefined || va === '' || vb === undefined || vb === '';
    return (missing ? 1 : dir) * compareValues(va, vb) || num(a.id) - num(b.id);
  });
  let h = '<table id="trials-table" class="sortable"><thead><tr>';
  for (const c of cols) {
    const arrow = c === col ? (dir > 0 ? ' ▲' : ' ▼') : '';
    const cls = [c.num ? 'num' : '', c.hp ? 'hp' : '', c.metric ? 'searcher-metric' : ''].filter(Boolean).join(' ');
    h += `<th data-sort="${esc(c.key)}"${cls ? ` class="${cls}"` : ''} title="sort by ${esc(c.label)}">${esc(c.label)}${arrow}</th>`;
  }
  h += '</tr></thead><tbody>';
  for (const t of sorted) {
    h += `<tr class="trial-row${best !== null && t.id === best ? ' best' : ''}" data-trial="${esc(t.id)}">` +
      cols.map((c) => `<td${c.num ? ' class="num"' : ''}>${c.html(t)}</td>`).join('') + '</tr>';
  }
  return h + '</tbody></table>';
}

// The searcher metric against one hyperparameter, a point per trial with a value.
function searchScatter(trials, metric, best) {
  const hps = new Set();
  for (const t of trials) for (const [k] of flattenHparams(t.hparams_json)) hps.add(k);
  const names = [...hps].sort();
  const pick = $('scatter-hp');
  if (!names.length || !pick) return '';
  // Default: the first hyperparameter whose value differs between trials.
  const varies = (k) => new Set(trials.map((t) => JSON.stringify((flattenHparams(t.hparams_json).find(([n]) => n === k) || [])[1]))).size > 1;
  if (!names.includes(prefs.scatterHp)) prefs.scatterHp = names.find(varies) || names[0];
  setOptions(pick, names);
  pick.value = prefs.scatterHp;
  const points = [];
  for (const t of trials) {
    const y = bestValue(t, metric);
    const e = flattenHparams(t.hparams_json).find(([n]) => n === prefs.scatterHp);
    if (y === undefined || !e) continue;
    points.push({ x: e[1], y, label: `trial ${t.id}`, best: t.id === best });
  }
  const categorical = points.some((p) => typeof p.x !== 'number');
  return scatterChart(`best ${metric.name} by ${prefs.scatterHp}`, points,
    { xLabel: prefs.scatterHp, yLabel: metric.name, categorical, log: prefs.log });
}

async function experimentView(id, params) {
  prefsFrom(params);
  $('view').innerHTML =
    `<h1>Experiment ${esc(id)} <span id="exp-name"></span></h1>` +
    '<div class="toolbar" id="actions"><button id="act-pause" hidden>Pause</button><button id="act-activate" hidden>Activate</button>' +
    '<button id="act-kill" class="danger" hidden>Kill</button><span id="action-msg" class="muted"></span></div>' +
    '<div id="exp-detail"></div><h2>Trials</h2><p id="best-trial"></p><div id="trials"></div>' +
    '<div id="search-section" hidden><h2>Searcher metric by hyperparameter</h2>' +
    '<div class="toolbar"><label>Hyperparameter <select id="scatter-hp"></select></label></div><div class="charts" id="scatter"></div></div>' +
    '<h2>Metrics</h2>' + chartControls() + '<div class="charts" id="exp-charts"></div>' +
    '<h2>Checkpoints</h2><div id="checkpoints"></div>';
  wireChartControls();
  $('scatter-hp').addEventListener('change', (ev) => { prefs.scatterHp = ev.target.value; refreshNow(); });
  $('trials').addEventListener('click', (ev) => {
    const th = ev.target.closest('th[data-sort]');
    if (!th) return;
    const key = th.dataset.sort;
    prefs.sort = { key, dir: prefs.sort.key === key ? -prefs.sort.dir : 1 };
    refreshNow();
  });
  for (const action of ['pause', 'activate', 'kill']) {
    $('act-' + action).addEventListener('click', async () => {
      if (action === 'kill' && !confirm(`Kill experiment ${id}?`)) return;
      try {
        await api(`/experiments/${id}/${action}`, { method: 'POST', body: {} });
        $('action-msg').textContent = `${action} requested`;
        refreshNow();
      } catch (e) {
        $('action-msg').textContent = e.message;
      }
    });
  }
  return async () => {
    const r = await api('/experiments/' + id);
    const e = r.experiment || {};
    const trials = r.trials || [];
    const metric = searcherMetric(e.config_yaml);
    const best = metric && trials.length > 1 ? bestTrialId(trials, metric) : null;
    setHtml('exp-name', esc(e.name));
    const valid = validActions(e.state);
    for (const action of ['pause', 'activate', 'kill']) $('act-' + action).hidden = !valid.includes(action);
    if (!valid.length) $('action-msg').textContent = `${stateName(e.state).toLowerCase()}: no actions`;
    setHtml('exp-detail', kv([
      ['State', stateBadge(e.state)],
      ['Owner', esc(e.owner)],
      ['Progress', `<progress max="1" value="${num(e.progress)}"></progress> ${Math.round(num(e.progress) * 100)}%`],
      ['Description', esc(e.description)],
      ['Searcher', esc(e.searcher) + (metric ? ` on ${esc(metric.name)} (${metric.smallerIsBetter ? 'smaller' : 'larger'} is better)` : '')],
      ['Resource pool', esc(e.resource_pool)],
      ['Slots per trial', esc(e.slots_per_trial)],
      ['Priority', esc(e.priority)],
      ['Seed', esc(e.experiment_seed)],
      ['Started', esc(when(e.start_time_ms))],
      ['Ended', esc(when(e.end_time_ms))],
      ['Duration', esc(duration(e.start_time_ms, e.end_time_ms))],
      ['Error', e.error ? `<span class="error">${esc(e.error)}</span>` : ''],
      ['Warnings', (e.warnings || []).map(esc).join('<br>')],
    ]));
    const bt = trials.find((t) => t.id === best);
    setHtml('best-trial', bt
      ? `Best trial: <a href="#/trials/${esc(bt.id)}">${esc(bt.id)}</a> with ${esc(metric.name)} ${fmtMetric(metric.name, bestValue(bt, metric))}`
      : '');
    setHtml('trials', trials.length ? trialsTable(trials, metric, best) : '<p class="muted">No trials yet.</p>');
    const search = metric && trials.length > 1;
    $('search-section').hidden = !search;
    setHtml('scatter', search ? searchScatter(trials, metric, best) : '');
    // Curves of the first 8 trials (the best one among them), one colour per trial.
    const plotted = trials.slice(0, 8);
    if (best !== null && !plotted.some((t) => t.id === best)) plotted[plotted.length - 1] = trials.find((t) => t.id === best);
    const metrics = await Promise.all(plotted.map((t) => api(`/trials/${t.id}/metrics?max_points=300`)));
    const runs = plotted.map((t, i) => ({
      rows: metrics[i].metrics || [],
      prefix: plotted.length > 1 ? `trial ${t.id} ` : '',
      color: plotted.length > 1 ? COLORS[i % COLORS.length] : undefined,
    }));
    setHtml('exp-charts', metricCharts(runs));
    const ck = (await api(`/experiments/${id}/checkpoints`)).checkpoints || [];
    setHtml('checkpoints', ck.length
      ? '<table id="checkpoints-table"><thead><tr><th>UUID</th><th class="num">Trial</th><th class="num">Batches</th><th>State</th><th>Reported</th><th>Path</th><th>Metrics</th></tr></thead><tbody>' +
        ck.map((c) => `<tr><td><code>${esc(c.uuid)}</code></td><td class="num"><a href="#/trials/${esc(c.trial_id)}">${esc(c.trial_id)}</a></td>` +
          `<td class="num">${esc(c.total_batches)}</td><td>${stateBadge(c.state)}</td><td>${esc(when(c.report_time_ms))}</td>` +
          `<td><code>${esc(c.storage_path)}</code></td><td>${Object.entries(c.metrics || {}).filter(([k]) => shownMetric(k)).map(([k, v]) => `${esc(k)} ${fmtMetric(k, v)}`).join(', ')}</td></tr>`).join('') +
        '</tbody></table>'
      : '<p class="muted">No checkpoints.</p>');
  };
}

// ---------------------------------------------------------------------------------------
// Trial.

let logRun = null;  // the current log follower; a new one (rank filter, navigation) ends it

function pad(n, w) {
  return String(n).padStart(w || 2, '0');
}

// "2026-11-24 22:12:22.123" in local time.
function timestamp(ms) {
  const d = new Date(num(ms));
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

// Follows the trial's logs (only `rank`'s when not ''), long polling, until the trial ends,
// the page navigates or another follower starts.
async function followLogs(trialId, gen, rank) {
  const run = { afterId: 0, lines: 0 };
  logRun = run;
  const live = () => gen === generation && logRun === run;
  const pre = $('logs');
  pre.textContent = '';
  const filter = rank === '' || rank === undefined ? '' : `&rank=${encodeURIComponent(rank)}`;
  while (live()) {
    let r;
    try {
      r = await api(`/trials/${trialId}/logs?after_id=${run.afterId}&limit=1000&follow=true&wait_ms=15000${filter}`);
    } catch (e) {
      if (!live()) return;
      setHtml('logs-status', `<span class="error">${esc(e.message)}</span>`);
      await new Promise((res) => setTimeout(res, POLL_MS));
      continue;
    }
    if (!live()) return;
    const lines = r.lines || [];
    if (lines.length) {
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      let html = '';
      for (const l of lines) {
        run.afterId = Math.max(run.afterId, num(l.id));
        const hasRank = l.rank !== undefined && l.rank !== null && num(l.rank) >= 0 && l.stream !== 'master';
        if (hasRank) noteRank(num(l.rank));
        const time = l.time_ms ? `<span class="ts">${esc(timestamp(l.time_ms))}</span> ` : '';
        const rk = hasRank ? `<span class="rank">[rank ${esc(l.rank)}]</span> ` : '';
        html += `<span class="line stream-${esc(l.stream)}">${time}${rk}${esc(l.message)}</span>\n`;
      }
      pre.insertAdjacentHTML('beforeend', html);
      run.lines += lines.length;
      while (pre.childNodes.length > 20000) pre.removeChild(pre.firstChild);
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    }
    const which = filter ? ` of rank ${esc(rank)}` : '';
    setHtml('logs-status', `${run.lines} line(s)${which}${r.done ? ' — the trial has ended' : ' — following'}`);
    if (r.done) return;
  }
}

// Adds rank `rank` to the log rank filter.
function noteRank(rank) {
  const pick = $('log-rank');
  if (!pick || [...pick.options].some((o) => o.value === String(rank))) return;
  const ranks = [...pick.options].map((o) => o.value).filter((v) => v !== '').map(Number).concat([rank]).sort((a, b) => a - b);
  setOptions(pick, ranks.map(String), 'all ranks');
}

// The timings table: one row per timed operation (mean, p50, p90, p99, max of the latest
// report, and reports), slowest mean first; then the rates.
function timingsTable(summary) {
  const ops = new Map(), rates = [], other = [];
  for (const [k, v] of Object.entries(summary || {})) {
    const m = k.match(/^(.*)_(mean|p50|p90|p99|max)_ms$/) || k.match(/^(.*)_(count)$/);
    if (m) {
      if (!ops.has(m[1])) ops.set(m[1], {});
      ops.get(m[1])[m[2]] = v;
    } else if (/_per_second$/.test(k)) {
      rates.push([k, v]);
    } else {
      other.push([k, v]);
    }
  }
  if (!ops.size && !rates.length && !other.length) return '';
  const rows = [...ops.entries()].sort((a, b) => num(b[1].mean && b[1].mean.last) - num(a[1].mean && a[1].mean.last) || a[0].localeCompare(b[0]));
  const cell = (s) => `<td class="num">${s ? fmtMs(s.last) : ''}</td>`;
  let h = '<table id="timings-table" class="kv"><thead><tr><th>Operation</th><th class="num">Mean</th><th class="num">p50</th><th class="num">p90</th>' +
    '<th class="num">p99</th><th class="num">Max</th><th class="num">Samples (last report)</th><th class="num">Mean over reports</th></tr></thead><tbody>';
  if (rows.length) h += '<tr class="group"><th colspan="8">time per operation (latest report), slowest first</th></tr>';
  for (const [op, s] of rows) {
    h += `<tr><td>${esc(op)}</td>${cell(s.mean)}${cell(s.p50)}${cell(s.p90)}${cell(s.p99)}${cell(s.max)}` +
      `<td class="num">${s.count ? fmt(s.count.last) : ''}</td><td class="num">${s.mean ? `${fmtMs(s.mean.min)} – ${fmtMs(s.mean.max)}` : ''}</td></tr>`;
  }
  if (rates.length) {
    h += '<tr class="group"><th colspan="8">throughput (latest report; lowest – highest)</th></tr>';
    for (const [k, v] of rates.sort((a, b) => a[0].localeCompare(b[0]))) {
      const unit = k.replace(/_per_second$/, '') + '/s';
      h += `<tr><td>${esc(k)}</td><td class="num">${fmtRate(v.last, unit)}</td><td colspan="5"></td><td class="num">${fmtRate(v.min, unit)} – ${fmtRate(v.max, unit)}</td></tr>`;
    }
  }
  if (other.length) {
    h += '<tr class="group"><th colspan="8">other</th></tr>';
    for (const [k, v] of other.sort((a, b) => a[0].localeCompare(b[0]))) {
      h += `<tr><td>${esc(k)}</td><td class="num">${fmt(v.last)}</td><td colspan="5"></td><td class="num">${fmt(v.min)} – ${fmt(v.max)}</td></tr>`;
    }
  }
  return h + '</tbody></table>';
}

async function trialView(id, params) {
  prefsFrom(params);
  const gen = generation;
  $('view').innerHTML =
    `<h1>Trial ${esc(id)} <span id="trial-exp"></span></h1><div id="trial-detail"></div>` +
    '<h2>Metrics</h2>' + chartControls() + '<div class="charts" id="trial-charts"></div>' +
    '<h2>Timings</h2><div id="timings"></div>' +
    '<h2>System metrics</h2><div class="charts" id="system"></div>' +
    '<h2>Logs <span id="logs-status" class="muted"></span></h2>' +
    '<div class="toolbar"><label>Rank <select id="log-rank"><option value="">all ranks</option></select></label></div>' +
    '<pre class="logs" id="logs"></pre>';
  wireChartControls();
  $('log-rank').addEventListener('change', (ev) => followLogs(id, gen, ev.target.value));
  followLogs(id, gen, '');
  return async () => {
    const [r, m] = await Promise.all([api('/trials/' + id), api(`/trials/${id}/metrics?max_points=500`)]);
    const t = r.trial || {};
    const a = t.allocation || {};
    const agents = [...new Set((a.ranks || []).map((x) => x.agent_id))];
    for (const x of a.ranks || []) noteRank(num(x.rank));
    setHtml('trial-exp', `of <a href="#/experiments/${esc(t.experiment_id)}">experiment ${esc(t.experiment_id)}</a>`);
    const summary = (s) => Object.entries(s || {}).filter(([k]) => shownMetric(k)).map(([k, v]) =>
      `<tr><td>${esc(k)}</td><td class="num">${fmtMetric(k, v.last)}</td><td class="num">${fmtMetric(k, v.min)}</td><td class="num">${fmtMetric(k, v.max)}</td><td class="num">${esc(v.count)}</td></tr>`).join('');
    const vs = summary(t.validation_summary), ts = summary(t.training_summary);
    const hps = flattenHparams(t.hparams_json);
    const search = t.search || {};
    setHtml('trial-detail', kv([
      ['State', stateBadge(t.state)],
      ['Waiting because', t.pending_reason ? `<span class="reason">${esc(t.pending_reason)}</span>` : ''],
      ['Error', t.error ? `<span class="error">${esc(t.error)}</span>` : ''],
      ['Stopped early', search.stopped_early ? `<span class="reason">${esc(search.stop_reason || 'by the searcher')}</span>` : ''],
      ['Batches', `${esc(t.total_batches)} / ${esc(t.target_batches)}`],
      ['Restarts', esc(t.restarts)],
      ['Seed', esc(t.seed)],
      ['Allocation', a.id ? `${esc(a.id)} ${stateBadge(a.state)} on ${esc(agents.join(', '))}` : ''],
      ['Started', esc(when(t.start_time_ms))],
      ['Duration', esc(duration(t.start_time_ms, t.end_time_ms))],
      ['Latest checkpoint', esc(t.latest_checkpoint)],
    ]) + (hps.length ? '<table id="hparams-table" class="kv"><thead><tr><th>Hyperparameter</th><th class="num">Value</th></tr></thead><tbody>' +
      hps.map(([k, v]) => `<tr><td>${esc(k)}</td><td class="num">${fmtHparam(v)}</td></tr>`).join('') + '</tbody></table>' : '') +
      (vs || ts ? '<table id="metric-summary" class="kv"><thead><tr><th>Metric</th><th class="num">Last</th><th class="num">Min</th><th class="num">Max</th><th class="num">Count</th></tr></thead><tbody>' +
      (vs ? `<tr class="group"><th colspan="5">validation</th></tr>${vs}` : '') + (ts ? `<tr class="group"><th colspan="5">training</th></tr>${ts}` : '') + '</tbody></table>' : ''));
    const rows = m.metrics || [];
    setHtml('trial-charts', metricCharts([{ rows, prefix: '' }]));
    const timing = seriesFrom(rows, 'timings', (k) => /_mean_ms$/.test(k), '', false);
    setHtml('timings', timingsTable(t.timings_summary) + '<div class="charts">' +
      lineChart('Mean time per operation (ms)', timing, { log: prefs.log }) + '</div>');
    const sys = r.system_metrics || [];
    const t0 = sys.length ? num(sys[0].time_ms) : 0;
    const byAgent = (f) => {
      const out = new Map();
      for (const s of sys) {
        if (!out.has(s.agent_id)) out.set(s.agent_id, []);
        out.get(s.agent_id).push([(num(s.time_ms) - t0) / 1000, f(s)]);
      }
      return [...out.entries()].map(([agent, points]) => ({ name: agent, points }));
    };
    const gpuSeries = new Map();
    for (const s of sys) {
      for (const g of s.gpus || []) {
        const k = `${s.agent_id} gpu ${g.slot_id}`;
        if (!gpuSeries.has(k)) gpuSeries.set(k, []);
        gpuSeries.get(k).push([(num(s.time_ms) - t0) / 1000, num(g.utilization_percent)]);
      }
    }
    setHtml('system', sys.length
      ? lineChart('CPU utilisation (%)', byAgent((s) => num(s.cpu_utilization_percent)), { xLabel: 'seconds', zeroBased: true }) +
        lineChart('Free memory (GiB)', byAgent((s) => num(s.memory_free_bytes) / 2 ** 30), { xLabel: 'seconds' }) +
        lineChart('Network (MB/s sent + received)', byAgent((s) => (num(s.network_sent_bytes_per_second) + num(s.network_received_bytes_per_second)) / 1e6), { xLabel: 'seconds', zeroBased: true }) +
        (gpuSeries.size ? lineChart('GPU utilisation (%)', [...gpuSeries.entries()].map(([name, points]) => ({ name, points })), { xLabel: 'seconds', zeroBased: true }) : '')
      : '<p class="muted">No recent system metrics (shown while the trial runs).</p>');
  };
}

// ---------------------------------------------------------------------------------------
// Login and navigation.

function showLogin(message) {
  generation++;
  clearTimeout(refreshTimer);
  currentRefresh = null;
  setHtml('user', '');
  $('view').innerHTML =
    '<form class="login" id="login-form"><h1>Log in to det</h1>' +
    (message ? `<p class="error">${esc(message)}</p>` : '') +
    '<input id="login-user" autocomplete="username" placeholder="user name" value="admin">' +
    '<input id="login-password" type="password" autocomplete="current-password" placeholder="password">' +
    '<button type="submit">Log in</button><p class="muted">or run <code>det user login</code> and open the page with <code>#token=…</code></p></form>';
  $('login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      const r = await api('/auth/login', { method: 'POST', body: { username: $('login-user').value, password: $('login-password').value } });
      token = r.token;
      localStorage.setItem(TOKEN_KEY, token);
      route();
    } catch (e) {
      showLogin(e.message);
    }
  });
}

async function showUser() {
  try {
    const me = await api('/me');
    setHtml('user', `${esc(me.user.username)} <button id="logout">Log out</button>`);
    $('logout').addEventListener('click', async () => {
      try { await api('/auth/logout', { method: 'POST', body: {} }); } catch (e) { /* ended anyway */ }
      token = '';
      localStorage.removeItem(TOKEN_KEY);
      showLogin('Logged out.');
    });
  } catch (e) {
    if (e.status === 404) setHtml('user', '');  // users not enabled on this master
  }
}

function refreshNow() {
  clearTimeout(refreshTimer);
  tick(generation);
}

async function tick(gen) {
  if (gen !== generation || !currentRefresh) return;
  try {
    await currentRefresh();
    if (gen === generation) setStatus('updated ' + new Date().toLocaleTimeString(), false);
  } catch (e) {
    if (gen === generation && !(e instanceof ApiError && e.status === 401)) setStatus(e.message, true);
    if (e instanceof ApiError && e.status === 401) return;
  }
  if (gen === generation) refreshTimer = setTimeout(() => tick(gen), POLL_MS);
}

async function route() {
  // "#/path?x=y"; a token in the fragment ("#/trials/1?token=T" or "#token=T") is kept and
  // removed from the address bar.
  let hash = location.hash.replace(/^#/, '');
  let [path, query] = hash.split('?');
  if (path.startsWith('token=')) { query = path; path = '/'; }
  const params = new URLSearchParams(query || '');
  if (params.get('token')) {
    token = params.get('token');
    localStorage.setItem(TOKEN_KEY, token);
    params.delete('token');
    const rest = params.toString();
    history.replaceState(null, '', '#' + (path || '/') + (rest ? '?' + rest : ''));
  }
  generation++;
  clearTimeout(refreshTimer);
  const gen = generation;
  path = path || '/';
  document.querySelectorAll('header nav a').forEach((a) => a.classList.toggle('active',
    (a.dataset.nav === 'overview' && path === '/') || (a.dataset.nav === 'experiments' && path.startsWith('/experiments'))));
  let m;
  try {
    if ((m = path.match(/^\/experiments\/(\d+)$/))) currentRefresh = await experimentView(m[1], params);
    else if ((m = path.match(/^\/trials\/(\d+)$/))) currentRefresh = await trialView(m[1], params);
    else if (path === '/experiments') currentRefresh = await experimentList(params);
    else currentRefresh = await overview();
  } catch (e) {
    setStatus(e.message, true);
    return;
  }
  if (gen !== generation) return;
  showUser();
  api('/master').then((info) => { $('cluster-name').textContent = `${info.cluster_name} · ${info.version}`; }).catch(() => {});
  tick(gen);
}

window.addEventListener('hashchange', route);
route();
