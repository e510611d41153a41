// det's web page: what a search needs beyond one trial: which trials the charts show (all,
// the best N, a selection), the parallel-coordinates chart, the trials' metric rows (kept
// for ended trials, so a 3-second refresh fetches only what can still change) and the
// compare view (#/experiments/ID/compare?trials=A,B,C). Loaded after metrics.js and
// charts.js, before experiment.js.
'use strict';

const TRIAL_ENDED = ['COMPLETED', 'CANCELED', 'ERROR'];
const COMPARE_MIN = 2, COMPARE_MAX = 4;

// Trials sorted by id; a trial's colour is trialColor(its index here).
function byId(trials) {
  return trials.slice().sort((a, b) => num(a.id) - num(b.id));
}

function colorOf(trials, t) {
  return trialColor(byId(trials).findIndex((x) => String(x.id) === String(t.id)));
}

// A colour swatch (an SVG square; the page's CSP allows no inline styles).
function swatch(color) {
  return `<svg class="swatch" viewBox="0 0 10 10"><rect width="10" height="10" fill="${esc(color)}"/></svg>`;
}

// Trials with a value of the searcher metric, best first (ties by id).
function rankTrials(trials, metric) {
  return trials.filter((t) => Number.isFinite(bestValue(t, metric)))
    .sort((a, b) => (metric.smallerIsBetter ? 1 : -1) * (bestValue(a, metric) - bestValue(b, metric)) || num(a.id) - num(b.id));
}

// The trials the charts show, by prefs.trials: 'all', 'best' (prefs.bestN of them) or
// 'selected' (prefs.selected).
function chartedTrials(trials, metric) {
  if (prefs.trials === 'selected') return byId(trials).filter((t) => prefs.selected.includes(String(t.id)));
  if (prefs.trials === 'best' && metric) return rankTrials(trials, metric).slice(0, prefs.bestN);
  return byId(trials);
}

function toggleSelected(id) {
  id = String(id);
  const i = prefs.selected.indexOf(id);
  if (i >= 0) prefs.selected.splice(i, 1);
  else prefs.selected.push(id);
  prefs.selected.sort((a, b) => num(a) - num(b));
}

// Writes the chart choice into the address (without a navigation), so a reload or a
// shared link shows the same trials.
function syncHash() {
  let [path, query] = location.hash.replace(/^#/, '').split('?');
  const params = new URLSearchParams(query || '');
  params.set('trials', prefs.trials);
  if (prefs.trials === 'best') params.set('best', String(prefs.bestN)); else params.delete('best');
  if (prefs.selected.length) params.set('sel', prefs.selected.join(',')); else params.delete('sel');
  history.replaceState(null, '', `#${path}?${params.toString()}`);
}

// The toolbar above the trial table: what the charts show, and the compare link.
function trialPickToolbar() {
  return '<div class="toolbar" id="trial-pick"><label>Charts show <select id="trials-mode">' +
    '<option value="all">all trials</option><option value="best">the best</option><option value="selected">the selected trials</option></select></label>' +
    `<input id="best-n" type="number" min="1" max="999" value="${esc(prefs.bestN)}" title="how many of the best trials">` +
    '<span id="charted-count" class="muted"></span><button id="clear-selection">Clear selection</button>' +
    '<span id="compare"></span></div>';
}

// Wires the toolbar and the selection's check boxes in `container` (and clicks on the
// parallel chart's lines).
function wireTrialPick(expId, containers) {
  $('trials-mode').value = prefs.trials;
  $('best-n').hidden = prefs.trials !== 'best';
  $('trials-mode').addEventListener('change', (ev) => {
    prefs.trials = ev.target.value;
    $('best-n').hidden = prefs.trials !== 'best';
    syncHash();
    refreshNow();
  });
  $('best-n').addEventListener('change', (ev) => {
    prefs.bestN = Math.max(1, Math.round(num(ev.target.value)) || 1);
    syncHash();
    refreshNow();
  });
  $('clear-selection').addEventListener('click', () => { prefs.selected = []; syncHash(); refreshNow(); });
  for (const c of containers) {
    $(c).addEventListener('click', (ev) => {
      const box = ev.target.closest('input[data-pick]');
      const line = ev.target.closest('polyline[data-trial]');
      if (!box && !line) return;
      toggleSelected(box ? box.dataset.pick : line.dataset.trial);
      syncHash();
      refreshNow();
    });
  }
}

// The toolbar's texts after a refresh.
function showTrialPick(expId, trials, charted) {
  setHtml('charted-count', `${charted.length} of ${trials.length} trial(s) charted; ${prefs.selected.length} selected`);
  const n = prefs.selected.length;
  setHtml('compare', n >= COMPARE_MIN && n <= COMPARE_MAX
    ? `<a id="compare-link" href="#/experiments/${esc(expId)}/compare?trials=${esc(prefs.selected.join(','))}">Compare the ${n} selected trials</a>`
    : `<span class="muted">select ${COMPARE_MIN} to ${COMPARE_MAX} trials to compare them</span>`);
}

// Metric rows of trials, by id: an ended trial's rows are fetched once.
const metricsCache = new Map();

async function trialMetrics(t) {
  const id = String(t.id);
  const ended = TRIAL_ENDED.includes(stateName(t.state));
  const have = metricsCache.get(id);
  if (have && have.ended && have.batches === num(t.total_batches)) return have.rows;
  const r = await api(`/trials/${id}/metrics?max_points=300`);
  const rows = r.metrics || [];
  metricsCache.set(id, { rows, ended, batches: num(t.total_batches) });
  return rows;
}

// The parallel-coordinates chart of a search: the hyperparameters that vary (all of them
// when none does) and the searcher metric's best value, one line per trial with a value.
function searchParallel(trials, metric, best) {
  const withValue = byId(trials).filter((t) => Number.isFinite(bestValue(t, metric)));
  const hps = withValue.map((t) => new Map(flattenHparams(t.hparams_json)));
  const names = [...new Set(hps.flatMap((m) => [...m.keys()]))].sort();
  const varies = names.filter((k) => new Set(hps.map((m) => JSON.stringify(m.get(k)))).size > 1);
  const dims = (varies.length ? varies : names).map((k) => ({
    name: k, values: hps.map((m) => (m.has(k) ? m.get(k) : 'none')),
  }));
  dims.push({ name: `best ${metric.name}`, values: withValue.map((t) => bestValue(t, metric)) });
  const lines = withValue.map((t) => ({
    id: t.id, label: `trial ${t.id}`, best: best !== null && String(t.id) === String(best),
    selected: prefs.selected.includes(String(t.id)),
  }));
  const missing = trials.length - withValue.length;
  return parallelChart(`parallel coordinates: ${metric.name}`, dims, lines, { smallerIsBetter: metric.smallerIsBetter }) +
    (missing ? `<p class="muted">${missing} trial(s) without a value of ${esc(metric.name)} are not drawn.</p>` : '');
}

// One row per fact, one column per trial; a hyperparameter row whose values differ is
// marked.
function compareTable(trials, chosen, metric) {
  const hps = chosen.map((t) => new Map(flattenHparams(t.hparams_json)));
  const names = [...new Set(hps.flatMap((m) => [...m.keys()]))].sort();
  const vnames = [...new Set(chosen.flatMap((t) => Object.keys(t.validation_summary || {})))].filter(shownMetric).sort();
  let h = '<table id="compare-table" class="kv"><thead><tr><th></th>' +
    chosen.map((t) => `<th class="num" data-trial="${esc(t.id)}">${swatch(colorOf(trials, t))} <a href="#/trials/${esc(t.id)}">trial ${esc(t.id)}</a></th>`).join('') +
    '</tr></thead><tbody>';
  const row = (label, cells, cls) => `<tr${cls ? ` class="${cls}"` : ''}><td>${label}</td>${cells.map((c) => `<td class="num">${c}</td>`).join('')}</tr>`;
  h += row('State', chosen.map((t) => stateBadge(t.state)));
  h += row('Batches', chosen.map((t) => esc(t.total_batches)));
  h += `<tr class="group"><th colspan="${chosen.length + 1}">hyperparameters</th></tr>`;
  for (const k of names) {
    const vals = hps.map((m) => m.get(k));
    const differs = new Set(vals.map((v) => JSON.stringify(v))).size > 1;
    h += row(esc(k), vals.map((v) => (v === undefined ? '' : fmtHparam(v))), differs ? 'hp differs' : 'hp');
  }
  if (metric) {
    h += `<tr class="group"><th colspan="${chosen.length + 1}">searcher metric</th></tr>`;
    const vals = chosen.map((t) => bestValue(t, metric));
    const top = vals.filter(Number.isFinite).reduce((a, v) => (a === undefined || (metric.smallerIsBetter ? v < a : v > a) ? v : a), undefined);
    h += `<tr class="metric"><td>best ${esc(metric.name)} (${metric.smallerIsBetter ? 'min' : 'max'})</td>` +
      vals.map((v) => `<td class="num${v === top ? ' best' : ''}">${v === undefined ? '' : fmtMetric(metric.name, v)}</td>`).join('') + '</tr>';
  }
  if (vnames.length) {
    h += `<tr class="group"><th colspan="${chosen.length + 1}">validation metrics (last)</th></tr>`;
    for (const k of vnames) {
      h += row(esc(k), chosen.map((t) => { const s = (t.validation_summary || {})[k]; return s ? fmtMetric(k, s.last) : ''; }), 'metric');
    }
  }
  return h + '</tbody></table>';
}

async function compareView(expId, params) {
  prefsFrom(params);
  const ids = [...new Set((params.get('trials') || '').split(',').map((s) => s.trim()).filter(Boolean))];
  $('view').innerHTML =
    `<h1>Compare trials of <a href="#/experiments/${esc(expId)}">experiment ${esc(expId)}</a> <span id="exp-name"></span></h1>` +
    '<div id="compare"></div><h2>Metrics</h2>' + chartControls() + '<div class="charts" id="compare-charts"></div>';
  wireChartControls();
  return async () => {
    if (ids.length < COMPARE_MIN || ids.length > COMPARE_MAX) {
      setHtml('compare', `<p class="error">Compare ${COMPARE_MIN} to ${COMPARE_MAX} trials: ${ids.length} given (?trials=A,B,C).</p>`);
      return;
    }
    const r = await api('/experiments/' + expId);
    const trials = r.trials || [];
    const chosen = ids.map((id) => trials.find((t) => String(t.id) === id));
    const unknown = ids.filter((id, i) => !chosen[i]);
    if (unknown.length) {
      setHtml('compare', `<p class="error">Not trials of experiment ${esc(expId)}: ${esc(unknown.join(', '))}.</p>`);
      return;
    }
    const metric = searcherMetric((r.experiment || {}).config_yaml);
    setHtml('exp-name', esc((r.experiment || {}).name));
    setHtml('compare', compareTable(trials, chosen, metric));
    const rows = await Promise.all(chosen.map(trialMetrics));
    setHtml('compare-charts', metricCharts(chosen.map((t, i) => ({
      rows: rows[i], prefix: `trial ${t.id} `, color: colorOf(trials, t),
    }))));
  };
}
