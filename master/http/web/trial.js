// det's web page: the trial view (#/trials/ID): metrics, the profiler (profiler.js) and followed logs.
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
// the page navigates or another follower starts; with the Follow box unchecked
// (prefs.follow false), reads the lines there are now and stops.
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
      const wait = prefs.follow ? '&follow=true&wait_ms=15000' : '';
      r = await api(`/trials/${trialId}/logs?after_id=${run.afterId}&limit=1000${wait}${filter}`);
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
    const paused = !r.done && !prefs.follow && lines.length < 1000;
    setHtml('logs-status', `${run.lines} line(s)${which}${r.done ? ' — the trial has ended' : paused ? ' — not following' : ' — following'}`);
    if (r.done || paused) return;
  }
}

// Adds rank `rank` to the log rank filter.
function noteRank(rank) {
  const pick = $('log-rank');
  if (!pick || [...pick.options].some((o) => o.value === String(rank))) return;
  const ranks = [...pick.options].map((o) => o.value).filter((v) => v !== '').map(Number).concat([rank]).sort((a, b) => a - b);
  setOptions(pick, ranks.map(String), 'all ranks');
}

async function trialView(id, params) {
  prefsFrom(params);
  const gen = generation;
  $('view').innerHTML =
    `<h1>Trial ${esc(id)} <span id="trial-exp"></span></h1><div id="trial-detail"></div>` +
    '<h2>Metrics</h2>' + chartControls() + '<div class="charts" id="trial-charts"></div>' +
    '<h2>Profiler</h2><div id="profiler"></div>' +
    '<h2>Logs <span id="logs-status" class="muted"></span></h2>' +
    '<div class="toolbar"><label>Rank <select id="log-rank"><option value="">all ranks</option></select></label>' +
    `<label>Search <input id="log-search" type="search" placeholder="text in the line" value="${esc(prefs.logq)}"></label>` +
    '<label>Level <select id="log-level"><option value="">all</option><option value="info">info and above</option>' +
    '<option value="warning">warnings and errors</option><option value="error">errors</option></select></label>' +
    `<label title="read new lines as they come"><input type="checkbox" id="log-follow"${prefs.follow ? ' checked' : ''}> follow</label>` +
    '<span id="logs-match" class="muted"></span></div>' +
    '<pre class="logs" id="logs"></pre>';
  wireChartControls();
  $('log-rank').addEventListener('change', (ev) => followLogs(id, gen, ev.target.value));
  $('log-level').value = LOG_LEVELS[prefs.level] === undefined ? '' : prefs.level;
  prefs.level = $('log-level').value;
  $('log-search').addEventListener('input', (ev) => { prefs.logq = ev.target.value; applyLogFilter(); });
  $('log-level').addEventListener('change', (ev) => { prefs.level = ev.target.value; applyLogFilter(); });
  $('log-follow').addEventListener('change', (ev) => { prefs.follow = ev.target.checked; followLogs(id, gen, $('log-rank').value); });
  followLogs(id, gen, '');
  // Whether the trial's experiment turns profiling on: read once per view.
  const profiling = { experiment: null, enabled: null };
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
    if (profiling.experiment !== t.experiment_id) {
      const e = await api('/experiments/' + t.experiment_id);
      profiling.experiment = t.experiment_id;
      profiling.enabled = profilingEnabled((e.experiment || {}).config_yaml);
    }
    setHtml('profiler', profilerHtml(t, rows, r.system_metrics || [], profiling.enabled));
  };
}
