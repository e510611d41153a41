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

function fmt(v) {
  const n = Number(v);
  if (!Number.isFinite(n)) return esc(v);
  if (n === 0) return '0';
  const a = Math.abs(n);
  if (Number.isInteger(n) && a < 1e9) return String(n);
  if (a >= 1e6 || a < 1e-3) return n.toExponential(3);
  return String(Number(n.toPrecision(4)));
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

function summaryCells(summary) {
  return Object.entries(summary || {}).map(([k, s]) => `${esc(k)} ${fmt(s.last)}`).join(', ');
}

async function experimentView(id) {
  $('view').innerHTML =
    `<h1>Experiment ${esc(id)} <span id="exp-name"></span></h1>` +
    '<div class="toolbar"><button id="kill" class="danger">Kill</button><span id="action-msg" class="muted"></span></div>' +
    '<div id="exp-detail"></div><h2>Trials</h2><div id="trials"></div>' +
    '<h2>Metrics</h2><div class="charts" id="exp-charts"></div>' +
    '<h2>Checkpoints</h2><div id="checkpoints"></div>';
  $('kill').addEventListener('click', async () => {
    if (!confirm(`Kill experiment ${id}?`)) return;
    try {
      await api(`/experiments/${id}/kill`, { method: 'POST', body: {} });
      $('action-msg').textContent = 'kill requested';
      refreshNow();
    } catch (e) {
      $('action-msg').textContent = e.message;
    }
  });
  return async () => {
    const r = await api('/experiments/' + id);
    const e = r.experiment || {};
    const trials = r.trials || [];
    setHtml('exp-name', esc(e.name));
    $('kill').disabled = ['COMPLETED', 'CANCELED', 'ERROR'].includes(stateName(e.state));
    setHtml('exp-detail', kv([
      ['State', stateBadge(e.state)],
      ['Owner', esc(e.owner)],
      ['Progress', `<progress max="1" value="${num(e.progress)}"></progress> ${Math.round(num(e.progress) * 100)}%`],
      ['Description', esc(e.description)],
      ['Searcher', esc(e.searcher)],
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
    let th = '<table id="trials-table"><thead><tr><th class="num">Trial</th><th>State</th><th class="num">Batches</th>' +
      '<th class="num">Restarts</th><th>Hyperparameters</th><th>Validation (last)</th><th>Training (last)</th><th>Waiting because</th></tr></thead><tbody>';
    for (const t of trials) {
      th += `<tr class="trial-row"><td class="num"><a href="#/trials/${esc(t.id)}">${esc(t.id)}</a></td><td>${stateBadge(t.state)}</td>` +
        `<td class="num">${esc(t.total_batches)} / ${esc(t.target_batches)}</td><td class="num">${esc(t.restarts)}</td>` +
        `<td><code>${esc(t.hparams_json)}</code></td><td>${summaryCells(t.validation_summary)}</td>` +
        `<td>${summaryCells(t.training_summary)}</td><td class="reason">${esc(t.pending_reason)}${t.error ? `<span class="error">${esc(t.error)}</span>` : ''}</td></tr>`;
    }
    setHtml('trials', th + '</tbody></table>');
    // Loss curves of the first trials (one colour per trial).
    const plotted = trials.slice(0, 8);
    const metrics = await Promise.all(plotted.map((t) => api(`/trials/${t.id}/metrics?max_points=300`)));
    const loss = [], other = [];
    plotted.forEach((t, i) => {
      const rows = metrics[i].metrics || [];
      const prefix = plotted.length > 1 ? `trial ${t.id} ` : '';
      const color = COLORS[i % COLORS.length];
      for (const s of seriesFrom(rows, 'training', isLoss, prefix, false)) loss.push(Object.assign(s, plotted.length > 1 ? { color } : {}));
      for (const s of seriesFrom(rows, 'validation', isLoss, prefix, true)) loss.push(Object.assign(s, plotted.length > 1 ? { color } : {}));
      for (const s of seriesFrom(rows, 'validation', (k) => !isLoss(k), prefix, false)) other.push(s);
    });
    setHtml('exp-charts', lineChart('Loss', loss) + lineChart('Validation metrics', other));
    const ck = (await api(`/experiments/${id}/checkpoints`)).checkpoints || [];
    setHtml('checkpoints', ck.length
      ? '<table id="checkpoints-table"><thead><tr><th>UUID</th><th class="num">Trial</th><th class="num">Batches</th><th>State</th><th>Reported</th><th>Path</th><th>Metrics</th></tr></thead><tbody>' +
        ck.map((c) => `<tr><td><code>${esc(c.uuid)}</code></td><td class="num"><a href="#/trials/${esc(c.trial_id)}">${esc(c.trial_id)}</a></td>` +
          `<td class="num">${esc(c.total_batches)}</td><td>${stateBadge(c.state)}</td><td>${esc(when(c.report_time_ms))}</td>` +
          `<td><code>${esc(c.storage_path)}</code></td><td>${Object.entries(c.metrics || {}).map(([k, v]) => `${esc(k)} ${fmt(v)}`).join(', ')}</td></tr>`).join('') +
        '</tbody></table>'
      : '<p class="muted">No checkpoints.</p>');
  };
}

let logState = null;

async function followLogs(trialId, gen) {
  logState = { trialId, afterId: 0, lines: 0 };
  const pre = $('logs');
  while (gen === generation) {
    let r;
    try {
      r = await api(`/trials/${trialId}/logs?after_id=${logState.afterId}&limit=1000&follow=true&wait_ms=15000`);
    } catch (e) {
      if (gen !== generation) return;
      setHtml('logs-status', `<span class="error">${esc(e.message)}</span>`);
      await new Promise((res) => setTimeout(res, POLL_MS));
      continue;
    }
    if (gen !== generation) return;
    const lines = r.lines || [];
    if (lines.length) {
      const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      let html = '';
      for (const l of lines) {
        logState.afterId = Math.max(logState.afterId, num(l.id));
        const rank = num(l.rank) >= 0 ? `[rank ${l.rank}] ` : '';
        const time = l.time_ms ? new Date(num(l.time_ms)).toLocaleTimeString() + ' ' : '';
        html += `<span class="stream-${esc(l.stream)}">${esc(time)}${esc(rank)}${esc(l.message)}</span>\n`;
      }
      pre.insertAdjacentHTML('beforeend', html);
      logState.lines += lines.length;
      while (pre.childNodes.length > 10000) pre.removeChild(pre.firstChild);
      if (atBottom) pre.scrollTop = pre.scrollHeight;
    }
    setHtml('logs-status', `${logState.lines} line(s)${r.done ? ' — the trial has ended' : ' — following'}`);
    if (r.done) return;
  }
}

async function trialView(id) {
  const gen = generation;
  $('view').innerHTML =
    `<h1>Trial ${esc(id)} <span id="trial-exp"></span></h1><div id="trial-detail"></div>` +
    '<h2>Metrics</h2><div class="charts" id="trial-charts"></div>' +
    '<h2>Timings</h2><div id="timings"></div>' +
    '<h2>System metrics</h2><div class="charts" id="system"></div>' +
    '<h2>Logs <span id="logs-status" class="muted"></span></h2><pre class="logs" id="logs"></pre>';
  followLogs(id, gen);
  return async () => {
    const [r, m] = await Promise.all([api('/trials/' + id), api(`/trials/${id}/metrics?max_points=500`)]);
    const t = r.trial || {};
    const a = t.allocation || {};
    const agents = [...new Set((a.ranks || []).map((x) => x.agent_id))];
    setHtml('trial-exp', `of <a href="#/experiments/${esc(t.experiment_id)}">experiment ${esc(t.experiment_id)}</a>`);
    const summary = (s) => Object.entries(s || {}).map(([k, v]) =>
      `<tr><td>${esc(k)}</td><td class="num">${fmt(v.last)}</td><td class="num">${fmt(v.min)}</td><td class="num">${fmt(v.max)}</td><td class="num">${esc(v.count)}</td></tr>`).join('');
    const vs = summary(t.validation_summary), ts = summary(t.training_summary);
    setHtml('trial-detail', kv([
      ['State', stateBadge(t.state)],
      ['Waiting because', t.pending_reason ? `<span class="reason">${esc(t.pending_reason)}</span>` : ''],
      ['Error', t.error ? `<span class="error">${esc(t.error)}</span>` : ''],
      ['Batches', `${esc(t.total_batches)} / ${esc(t.target_batches)}`],
      ['Restarts', esc(t.restarts)],
      ['Seed', esc(t.seed)],
      ['Hyperparameters', `<code>${esc(t.hparams_json)}</code>`],
      ['Allocation', a.id ? `${esc(a.id)} ${stateBadge(a.state)} on ${esc(agents.join(', '))}` : ''],
      ['Started', esc(when(t.start_time_ms))],
      ['Duration', esc(duration(t.start_time_ms, t.end_time_ms))],
      ['Latest checkpoint', esc(t.latest_checkpoint)],
    ]) + (vs || ts ? '<table id="metric-summary" class="kv"><thead><tr><th>Metric</th><th class="num">Last</th><th class="num">Min</th><th class="num">Max</th><th class="num">Count</th></tr></thead><tbody>' +
      (vs ? `<tr><th colspan="5">validation</th></tr>${vs}` : '') + (ts ? `<tr><th colspan="5">training</th></tr>${ts}` : '') + '</tbody></table>' : ''));
    const rows = m.metrics || [];
    const loss = seriesFrom(rows, 'training', isLoss, '', false).concat(seriesFrom(rows, 'validation', isLoss, '', true));
    const other = seriesFrom(rows, 'validation', (k) => !isLoss(k), '', false)
      .concat(seriesFrom(rows, 'training', (k) => !isLoss(k), '', false));
    setHtml('trial-charts', lineChart('Loss', loss) + lineChart('Other metrics', other));
    const timing = seriesFrom(rows, 'timings', () => true, '', false);
    const tsum = Object.entries(t.timings_summary || {});
    setHtml('timings', (tsum.length ? '<table id="timings-table" class="kv"><thead><tr><th>Timing</th><th class="num">Last</th><th class="num">Min</th><th class="num">Max</th><th class="num">Reports</th></tr></thead><tbody>' +
      tsum.map(([k, v]) => `<tr><td>${esc(k)}</td><td class="num">${fmt(v.last)}</td><td class="num">${fmt(v.min)}</td><td class="num">${fmt(v.max)}</td><td class="num">${esc(v.count)}</td></tr>`).join('') +
      '</tbody></table>' : '') + '<div class="charts">' + lineChart('Timings (ms)', timing) + '</div>');
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
    const gpu = [];
    for (const s of sys) {
      for (const g of s.gpus || []) gpu.push({ agent: s.agent_id, slot: g.slot_id, x: (num(s.time_ms) - t0) / 1000, y: num(g.utilization_percent) });
    }
    const gpuSeries = new Map();
    for (const g of gpu) {
      const k = `${g.agent} gpu ${g.slot}`;
      if (!gpuSeries.has(k)) gpuSeries.set(k, []);
      gpuSeries.get(k).push([g.x, g.y]);
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
    if ((m = path.match(/^\/experiments\/(\d+)$/))) currentRefresh = await experimentView(m[1]);
    else if ((m = path.match(/^\/trials\/(\d+)$/))) currentRefresh = await trialView(m[1]);
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
