// det's web page: the trial view (#/trials/ID): metrics, timings, system metrics and followed logs.
'use strict';

let logRun = null;  // the current log follower; a new one (rank filter, navigation) ends it

function pad(n, w) {
  return String(n).padStart(w || 2, '0');
}

// "2026-11-24 22:12:22.123" in local time.
function timestamp(ms) {
  const d = new Date(num(ms));
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}.${pad(d.getMilliseconds(), 3)}`;
}

// A log line's level, as its text writes one: "[warning]" (spdlog), "WARNING:" (Python's
// logging), "warning: " (the master's trial events) or an upper-case level word ("trial
// ERROR: ..."); 'info' when it names none. debug < info < warning < error.
const LOG_LEVELS = { trace: 0, debug: 0, info: 1, warning: 2, warn: 2, error: 3, err: 3, critical: 3, fatal: 3 };

function logLevel(message) {
  const head = String(message || '').slice(0, 80);
  const m = head.match(/\[(trace|debug|info|warning|warn|error|err|critical|fatal)\]/i) ||
    head.match(/^\W*(trace|debug|info|warning|warn|error|critical|fatal):/i) ||
    head.match(/\b(TRACE|DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)\b/);
  const level = m ? m[1].toLowerCase() : 'info';
  return ['trace', 'debug'].includes(level) ? 'debug' : LOG_LEVELS[level] === 2 ? 'warning' : LOG_LEVELS[level] === 3 ? 'error' : 'info';
}

// Whether a line (its text and level) passes the log search and the level filter.
function logShown(text, level) {
  if (prefs.level && LOG_LEVELS[level] < LOG_LEVELS[prefs.level]) return false;
  return !prefs.logq || text.toLowerCase().includes(prefs.logq.toLowerCase());
}

// Hides the lines the search and level filter leave out; says how many remain.
function applyLogFilter() {
  const pre = $('logs');
  if (!pre) return;
  let shown = 0, all = 0;
  for (const line of pre.children) {
    const ok = logShown(line.textContent, line.dataset.level);
    line.hidden = !ok;
    all++;
    if (ok) shown++;
  }
  setHtml('logs-match', prefs.logq || prefs.level ? `${shown} of ${all} line(s) match` : '');
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
        const level = logLevel(l.message);
        const text = `${time ? timestamp(l.time_ms) + ' ' : ''}${hasRank ? `[rank ${l.rank}] ` : ''}${l.message}\n`;
        html += `<span class="line stream-${esc(l.stream)}" data-level="${level}"${logShown(text, level) ? '' : ' hidden'}>${time}${rk}${esc(l.message)}\n</span>`;
      }
      pre.insertAdjacentHTML('beforeend', html);
      run.lines += lines.length;
      while (pre.childNodes.length > 20000) pre.removeChild(pre.firstChild);
      applyLogFilter();
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
    '<div class="toolbar"><label>Rank <select id="log-rank"><option value="">all ranks</option></select></label>' +
    `<label>Search <input id="log-search" type="search" placeholder="text in the line" value="${esc(prefs.logq)}"></label>` +
    '<label>Level <select id="log-level"><option value="">all</option><option value="info">info and above</option>' +
    '<option value="warning">warnings and errors</option><option value="error">errors</option></select></label>' +
    '<span id="logs-match" class="muted"></span></div>' +
    '<pre class="logs" id="logs"></pre>';
  wireChartControls();
  $('log-rank').addEventListener('change', (ev) => followLogs(id, gen, ev.target.value));
  $('log-level').value = LOG_LEVELS[prefs.level] === undefined ? '' : prefs.level;
  prefs.level = $('log-level').value;
  $('log-search').addEventListener('input', (ev) => { prefs.logq = ev.target.value; applyLogFilter(); });
  $('log-level').addEventListener('change', (ev) => { prefs.level = ev.target.value; applyLogFilter(); });
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
