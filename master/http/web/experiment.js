// det's web page: the experiment view (#/experiments/ID): actions, trial table, scatter, charts.
'use strict';

const ENDED = ['COMPLETED', 'CANCELED', 'ERROR', 'DELETED'];

const ACTIONS = ['pause', 'activate', 'kill', 'archive', 'unarchive'];

// The actions valid in an experiment's state (archive only once it has ended).
function validActions(state, archived) {
  const s = stateName(state);
  if (ENDED.includes(s)) return archived ? ['unarchive'] : ['archive'];
  if (s === 'ACTIVE') return ['pause', 'kill'];
  if (s === 'PAUSED') return ['activate', 'kill'];
  return ['kill'];
}

// The labels with a remove button each.
function labelsHtml(labels) {
  return (labels || []).map((l) =>
    `<span class="label">${esc(l)} <button class="link" data-remove-label="${esc(l)}" title="remove label">×</button></span>`).join(' ');
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
    '<button id="act-kill" class="danger" hidden>Kill</button><button id="act-archive" hidden>Archive</button>' +
    '<button id="act-unarchive" hidden>Unarchive</button>' +
    '<input id="label-input" placeholder="label" maxlength="128"><button id="act-label">Add label</button>' +
    '<span id="action-msg" class="muted"></span></div>' +
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
  // Labels: add from the input, remove with a label's ×.
  const patch = async (body, done) => {
    try {
      await api(`/experiments/${id}`, { method: 'PATCH', body });
      $('action-msg').textContent = done;
      refreshNow();
    } catch (e) {
      $('action-msg').textContent = e.message;
    }
  };
  $('act-label').addEventListener('click', () => {
    const label = $('label-input').value.trim();
    if (!label) return;
    $('label-input').value = '';
    patch({ add_labels: [label] }, `label ${label} added`);
  });
  $('exp-detail').addEventListener('click', (ev) => {
    const b = ev.target.closest('button[data-remove-label]');
    if (b) patch({ remove_labels: [b.dataset.removeLabel] }, `label ${b.dataset.removeLabel} removed`);
  });
  for (const action of ACTIONS) {
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
    const valid = validActions(e.state, !!e.archived);
    for (const action of ACTIONS) $('act-' + action).hidden = !valid.includes(action);
    setHtml('exp-detail', kv([
      ['State', stateBadge(e.state)],
      ['Owner', esc(e.owner)],
      ['Progress', `<progress max="1" value="${num(e.progress)}"></progress> ${Math.round(num(e.progress) * 100)}%`],
      ['Description', esc(e.description)],
      ['Labels', labelsHtml(e.labels)],
      ['Archived', e.archived ? 'yes' : ''],
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
