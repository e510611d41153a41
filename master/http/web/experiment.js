// det's web page: the experiment view (#/experiments/ID): actions, trial table (with the
// selection), scatter and parallel coordinates, charts of the charted trials, checkpoints.
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

// The columns of the trial table: {key, label, num, sort(t), html(t)}; `charted`: the
// trials on the charts (their colour shown beside their id).
function trialColumns(trials, metric, best, charted) {
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
  const shown = new Set((charted || []).map((t) => String(t.id)));
  const cols = [
    { key: 'pick', label: '', noSort: true,
      html: (t) => `<input type="checkbox" data-pick="${esc(t.id)}" title="select trial ${esc(t.id)}"${prefs.selected.includes(String(t.id)) ? ' checked' : ''}>` },
    { key: 'id', label: 'Trial', num: true, sort: (t) => num(t.id),
      html: (t) => (shown.has(String(t.id)) ? swatch(colorOf(trials, t)) + ' ' : '') +
        `<a href="#/trials/${esc(t.id)}">${esc(t.id)}</a>${best !== null && t.id === best ? ' <span class="best-mark" title="best trial by the searcher metric">★ best</span>' : ''}` },
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

function trialsTable(trials, metric, best, charted) {
  const cols = trialColumns(trials, metric, best, charted);
  const col = cols.find((c) => c.key === prefs.sort.key && !c.noSort) || cols[1];
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
    if (c.noSort) { h += '<th></th>'; continue; }
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
    '<div id="exp-detail"></div><h2>Trials</h2><p id="best-trial"></p>' + trialPickToolbar() + '<div id="trials"></div>' +
    '<div id="search-section" hidden><h2>Searcher metric by hyperparameter</h2>' +
    '<div class="charts" id="parallel"></div>' +
    '<div class="toolbar"><label>Hyperparameter <select id="scatter-hp"></select></label></div><div class="charts" id="scatter"></div></div>' +
    '<h2>Metrics</h2>' + chartControls() + '<div class="charts" id="exp-charts"></div>' +
    '<h2>Checkpoints</h2><div id="checkpoints"></div>';
  wireChartControls();
  wireTrialPick(id, ['trials', 'parallel']);
  wireRegisterVersion($('checkpoints'), $('action-msg'));
  $('scatter-hp').addEventListener('change', (ev) => { prefs.scatterHp = ev.target.value; refreshNow(); });
  $('trials').addEventListener('click', (ev) => {
    const th = ev.target.closest('th[data-sort]');  // (check boxes: wireTrialPick)
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
      ['Duration', esc(experimentDuration(e, stoppedAtMs(trials)))],
      ['Error', e.error ? `<span class="error">${esc(e.error)}</span>` : ''],
      ['Warnings', (e.warnings || []).map(esc).join('<br>')],
    ]));
    const bt = trials.find((t) => t.id === best);
    setHtml('best-trial', bt
      ? `Best trial: <a href="#/trials/${esc(bt.id)}">${esc(bt.id)}</a> with ${esc(metric.name)} ${fmtMetric(metric.name, bestValue(bt, metric))}`
      : '');
    // The charts show the chosen trials (all, the best N or the selection), each in its colour.
    const charted = chartedTrials(trials, metric);
    showTrialPick(id, trials, charted);
    setHtml('trials', trials.length ? trialsTable(trials, metric, best, charted) : '<p class="muted">No trials yet.</p>');
    const search = metric && trials.length > 1;
    $('search-section').hidden = !search;
    setHtml('parallel', search ? searchParallel(trials, metric, best) : '');
    setHtml('scatter', search ? searchScatter(trials, metric, best) : '');
    const metrics = await Promise.all(charted.map(trialMetrics));
    const many = trials.length > 1;
    setHtml('exp-charts', charted.length ? metricCharts(charted.map((t, i) => ({
      rows: metrics[i],
      prefix: many ? `trial ${t.id} ` : '',
      color: many ? colorOf(trials, t) : undefined,
    }))) : '<p class="muted">No trial chosen: select trials in the table or on the parallel coordinates.</p>');
    const ck = (await api(`/experiments/${id}/checkpoints`)).checkpoints || [];
    setHtml('checkpoints', checkpointsTable(ck, metric));
  };
}

// When the last of `trials` stopped running (ms): the latest end of their allocations;
// 0 while one still runs or when none ran.
function stoppedAtMs(trials) {
  let last = 0;
  for (const t of trials) {
    const a = t.allocation;
    if (!a || !a.id) continue;
    if (!num(a.end_time_ms)) return 0;
    last = Math.max(last, num(a.end_time_ms));
  }
  return last;
}

// "3m 12s": an ended experiment's from start to end; a running one's up to now; a paused
// one's up to when its trials stopped (`stoppedAt`, ms, from stoppedAtMs), never counting
// on while it is paused ("paused" when that is not known).
function experimentDuration(e, stoppedAt) {
  const s = stateName(e.state);
  if (num(e.end_time_ms) || s !== 'PAUSED') return duration(e.start_time_ms, e.end_time_ms);
  return stoppedAt ? `${duration(e.start_time_ms, stoppedAt)} (paused)` : 'paused';
}

// What a checkpoint row offers besides its facts: a completed checkpoint can be registered
// as the next version of a model (wireRegisterVersion).
function checkpointActions(c) {
  if (stateName(c.state) !== 'COMPLETED') return '';
  return `<button class="register-version" data-uuid="${esc(c.uuid)}">Register as model version</button>`;
}

// The "Register as model version" buttons of the checkpoint table: asks for the model's name
// (offering to create a model that does not exist) and registers the checkpoint as its next
// version; the outcome goes to `msg`.
function wireRegisterVersion(table, msg) {
  table.addEventListener('click', async (ev) => {
    const b = ev.target.closest('button.register-version');
    if (!b) return;
    const name = (prompt(`Register checkpoint ${b.dataset.uuid} as a version of model:`) || '').trim();
    if (!name) return;
    const path = `/models/${encodeURIComponent(name)}/versions`;
    const register = () => api(path, { method: 'POST', body: { checkpoint_uuid: b.dataset.uuid } });
    try {
      let r;
      try {
        r = await register();
      } catch (e) {
        if (e.code !== 'NOT_FOUND' || !confirm(`There is no model ${name}: create it?`)) throw e;
        await api('/models', { method: 'POST', body: { name } });
        r = await register();
      }
      const v = (r && r.model_version) || {};
      msg.textContent = `checkpoint ${b.dataset.uuid} is version ${v.version} of model ${name}`;
    } catch (e) {
      msg.textContent = e.message;
    }
  });
}

// The checkpoints, one column per metric they carry (the searcher metric first), the best
// by the searcher metric marked; sorted newest first.
function checkpointsTable(ck, metric) {
  if (!ck.length) return '<p class="muted">No checkpoints.</p>';
  const names = [...new Set(ck.flatMap((c) => Object.keys(c.metrics || {})))].filter(shownMetric)
    .sort((a, b) => (metric && a === metric.name ? -1 : metric && b === metric.name ? 1 : a.localeCompare(b)));
  let best = null;
  if (metric) {
    for (const c of ck) {
      const v = (c.metrics || {})[metric.name];
      if (stateName(c.state) !== 'COMPLETED' || v === undefined || !Number.isFinite(Number(v))) continue;
      if (best === null || (metric.smallerIsBetter ? Number(v) < best.v : Number(v) > best.v)) best = { uuid: c.uuid, v: Number(v) };
    }
  }
  const actions = ck.map(checkpointActions);
  const withActions = actions.some(Boolean);
  const rows = ck.map((c, i) => ({ c, action: actions[i] }))
    .sort((a, b) => num(b.c.report_time_ms) - num(a.c.report_time_ms) || num(b.c.total_batches) - num(a.c.total_batches));
  let h = '<table id="checkpoints-table"><thead><tr><th>UUID</th><th class="num">Trial</th><th class="num">Batches</th><th>State</th><th>Reported</th>' +
    names.map((k) => `<th class="num${metric && k === metric.name ? ' searcher-metric' : ''}">${esc(k)}</th>`).join('') +
    `<th>Path</th>${withActions ? '<th></th>' : ''}</tr></thead><tbody>`;
  for (const { c, action } of rows) {
    const isBest = best && c.uuid === best.uuid;
    h += `<tr class="checkpoint-row${isBest ? ' best' : ''}" data-uuid="${esc(c.uuid)}"><td><code>${esc(c.uuid)}</code>${isBest ? ' <span class="best-mark" title="best checkpoint by the searcher metric">best</span>' : ''}</td>` +
      `<td class="num"><a href="#/trials/${esc(c.trial_id)}">${esc(c.trial_id)}</a></td>` +
      `<td class="num">${esc(c.total_batches)}</td><td>${stateBadge(c.state)}</td><td>${esc(when(c.report_time_ms))}</td>` +
      names.map((k) => { const v = (c.metrics || {})[k]; return `<td class="num">${v === undefined ? '' : fmtMetric(k, v)}</td>`; }).join('') +
      `<td><code>${esc(c.storage_path)}</code></td>${withActions ? `<td>${action}</td>` : ''}</tr>`;
  }
  return h + '</tbody></table>';
}
