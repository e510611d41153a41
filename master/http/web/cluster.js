// det's web page: the cluster overview (#/) and the experiment list (#/experiments).
'use strict';

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

// The columns of the experiment list: {key, label, num, cls, html(e, extra)}; `extra.best`
// maps an experiment id to its best searcher-metric value ({metric, value, trial}) where
// known. ID and Name are always shown.
const EXP_COLUMNS = [
  { key: 'owner', label: 'Owner', cls: 'experiment-owner', html: (e) => esc(e.owner) },
  { key: 'state', label: 'State', cls: 'experiment-state', html: (e) => stateBadge(e.state) },
  { key: 'labels', label: 'Labels', cls: 'experiment-labels', html: (e) => (e.labels || []).map((l) => `<span class="label">${esc(l)}</span>`).join(' ') },
  { key: 'description', label: 'Description', cls: 'experiment-description', html: (e) => esc(e.description) },
  { key: 'searcher', label: 'Searcher', html: (e) => esc(e.searcher) },
  { key: 'best', label: 'Best metric', cls: 'experiment-best', html: (e, x) => {
    const b = x.best && x.best.get(String(e.id));
    return b && b.value !== undefined ? `${esc(b.metric)} ${fmtMetric(b.metric, b.value)} <a class="muted" href="#/trials/${esc(b.trial)}">trial ${esc(b.trial)}</a>` : '';
  } },
  { key: 'progress', label: 'Progress', html: (e) => `<progress max="1" value="${num(e.progress)}"></progress> ${Math.round(num(e.progress) * 100)}%` },
  { key: 'trials', label: 'Trials', num: true, html: (e) => esc(e.num_trials) },
  { key: 'pool', label: 'Pool', html: (e) => esc(e.resource_pool) },
  { key: 'started', label: 'Started', html: (e) => esc(when(e.start_time_ms)) },
  { key: 'duration', label: 'Duration', html: (e, x) => {
    const b = x.best && x.best.get(String(e.id));
    return esc(experimentDuration(e, b ? b.stoppedAt : 0));
  } },
  { key: 'archived', label: 'Archived', html: (e) => (e.archived ? 'archived' : '') },
];
const DEFAULT_EXP_COLUMNS = ['owner', 'state', 'labels', 'best', 'progress', 'trials', 'pool', 'started', 'duration'];

// The experiment table. options: columns (keys of EXP_COLUMNS; default
// DEFAULT_EXP_COLUMNS), selectable (a check box per row, checked for ids in `selected`),
// best (see EXP_COLUMNS).
function experimentsTable(experiments, options = {}) {
  if (!experiments.length) return '<p class="muted">No experiments.</p>';
  const keys = options.columns || DEFAULT_EXP_COLUMNS;
  const cols = EXP_COLUMNS.filter((c) => keys.includes(c.key));
  const selected = options.selected || new Set();
  const all = options.selectable && experiments.every((e) => selected.has(String(e.id)));
  let h = '<table id="experiments-table"><thead><tr>' +
    (options.selectable ? `<th><input type="checkbox" id="select-all" title="select every experiment shown"${all ? ' checked' : ''}></th>` : '') +
    '<th class="num">ID</th><th>Name</th>' + cols.map((c) => `<th${c.num ? ' class="num"' : ''} data-column="${c.key}">${esc(c.label)}</th>`).join('') +
    '</tr></thead><tbody>';
  for (const e of experiments) {
    h += `<tr class="experiment-row" data-id="${esc(e.id)}">` +
      (options.selectable ? `<td><input type="checkbox" data-select="${esc(e.id)}"${selected.has(String(e.id)) ? ' checked' : ''}></td>` : '') +
      `<td class="num">${esc(e.id)}</td>` +
      `<td class="experiment-name"><a href="#/experiments/${esc(e.id)}">${esc(e.name)}</a></td>` +
      cols.map((c) => {
        const cls = [c.num ? 'num' : '', c.cls || ''].filter(Boolean).join(' ');
        return `<td${cls ? ` class="${cls}"` : ''}>${c.html(e, options)}</td>`;
      }).join('') + '</tr>';
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
    setHtml('experiments', experimentsTable(list, { columns: ['owner', 'state', 'progress', 'trials', 'pool', 'started', 'duration'] }));
  };
}

// Best searcher-metric value of experiments, by id: {metric, value, trial, stoppedAt (see
// stoppedAtMs), ended, at}.
// An ended experiment's is fetched once; a running one's at most every 15 s.
const bestCache = new Map();
const BEST_REFRESH_MS = 15000;

async function bestOf(experiments) {
  const now = Date.now();
  const stale = experiments.filter((e) => {
    const b = bestCache.get(String(e.id));
    return !b || (!b.ended && now - b.at > BEST_REFRESH_MS) || (b.ended !== ENDED.includes(stateName(e.state)));
  });
  await Promise.all(stale.map(async (e) => {
    const r = await api('/experiments/' + e.id);
    const metric = searcherMetric((r.experiment || {}).config_yaml);
    const trials = r.trials || [];
    const id = metric ? bestTrialId(trials, metric) : null;
    const t = trials.find((x) => x.id === id);
    bestCache.set(String(e.id), {
      metric: metric ? metric.name : '', value: t ? bestValue(t, metric) : undefined, trial: t ? t.id : '',
      stoppedAt: stoppedAtMs(trials), ended: ENDED.includes(stateName(e.state)), at: now,
    });
  }));
  return bestCache;
}

const COLUMNS_KEY = 'det_experiment_columns';

// #/experiments: filters (state, name, owner, label, archived), a column chooser, a check
// box per row and bulk actions on the checked experiments. "?state=ACTIVE&name=x&user=u&
// label=l&archived=1&columns=owner,best" in the address set the filters and columns.
async function experimentList(params) {
  const limit = 50;
  let offset = num(params.get('offset'));
  let columns = (params.get('columns') || localStorage.getItem(COLUMNS_KEY) || DEFAULT_EXP_COLUMNS.join(','))
    .split(',').filter((k) => EXP_COLUMNS.some((c) => c.key === k));
  const selected = new Set();
  $('view').innerHTML =
    '<h1>Experiments</h1><div class="toolbar" id="filters">' +
    '<label>State <select id="f-state"><option value="">any</option>' +
    ['ACTIVE', 'PAUSED', 'STOPPING', 'COMPLETED', 'CANCELED', 'ERROR'].map((s) => `<option>${s}</option>`).join('') +
    '</select></label> <label>Name <input id="f-name" placeholder="contains"></label>' +
    '<label>Owner <input id="f-user" placeholder="user name" size="10"></label>' +
    '<label>Label <input id="f-label" placeholder="label" size="10"></label>' +
    '<label><input type="checkbox" id="f-archived"> archived too</label>' +
    '<details id="columns-pick"><summary>Columns</summary>' +
    EXP_COLUMNS.map((c) => `<label><input type="checkbox" data-column="${c.key}"${columns.includes(c.key) ? ' checked' : ''}> ${esc(c.label)}</label>`).join('') +
    '</details>' +
    '<button id="f-prev">Previous</button><button id="f-next">Next</button><span id="f-count" class="muted"></span></div>' +
    '<div class="toolbar" id="bulk"><span id="bulk-count" class="muted">0 selected</span>' +
    '<button id="bulk-kill" class="danger" disabled>Kill</button><button id="bulk-archive" disabled>Archive</button>' +
    '<button id="bulk-unarchive" disabled>Unarchive</button>' +
    '<input id="bulk-label" placeholder="label" maxlength="128" size="10"><button id="bulk-add-label" disabled>Add label</button>' +
    '<button id="bulk-remove-label" disabled>Remove label</button><span id="bulk-msg" class="muted"></span></div>' +
    '<div id="experiments"></div>';
  const state = $('f-state'), name = $('f-name'), user = $('f-user'), label = $('f-label'), archived = $('f-archived');
  state.value = params.get('state') || '';
  name.value = params.get('name') || '';
  user.value = params.get('user') || '';
  label.value = params.get('label') || '';
  archived.checked = params.get('archived') === '1';
  let shown = [];
  const reload = () => refreshNow();
  const refilter = () => { offset = 0; selected.clear(); reload(); };
  state.addEventListener('change', refilter);
  archived.addEventListener('change', refilter);
  for (const el of [name, user, label]) el.addEventListener('input', refilter);
  $('f-prev').addEventListener('click', () => { offset = Math.max(0, offset - limit); reload(); });
  $('f-next').addEventListener('click', () => { offset += limit; reload(); });
  $('columns-pick').addEventListener('change', (ev) => {
    const box = ev.target.closest('input[data-column]');
    if (!box) return;
    columns = EXP_COLUMNS.map((c) => c.key).filter((k) => (k === box.dataset.column ? box.checked : columns.includes(k)));
    localStorage.setItem(COLUMNS_KEY, columns.join(','));
    reload();
  });
  const showBulk = () => {
    const n = selected.size;
    $('bulk-count').textContent = `${n} selected`;
    for (const b of ['kill', 'archive', 'unarchive', 'add-label', 'remove-label']) $('bulk-' + b).disabled = n === 0;
  };
  $('experiments').addEventListener('change', (ev) => {
    const box = ev.target.closest('input[data-select]');
    if (box) {
      if (box.checked) selected.add(box.dataset.select); else selected.delete(box.dataset.select);
    } else if (ev.target.id === 'select-all') {
      for (const e of shown) if (ev.target.checked) selected.add(String(e.id)); else selected.delete(String(e.id));
      for (const b of document.querySelectorAll('input[data-select]')) b.checked = ev.target.checked;
    }
    showBulk();
  });
  // One request per checked experiment; the message says what was done and what failed.
  const bulk = async (what, call) => {
    const ids = [...selected].sort((a, b) => num(a) - num(b));
    if (!ids.length) return;
    if (what === 'kill' && !confirm(`Kill ${ids.length} experiment(s): ${ids.join(', ')}?`)) return;
    const results = await Promise.all(ids.map((id) => call(id).then(() => null, (e) => `${id}: ${e.message}`)));
    const failed = results.filter(Boolean);
    $('bulk-msg').textContent = `${what}: ${ids.length - failed.length} of ${ids.length} done` + (failed.length ? `; failed ${failed.join('; ')}` : '');
    refreshNow();
  };
  const post = (action) => (id) => api(`/experiments/${id}/${action}`, { method: 'POST', body: {} });
  $('bulk-kill').addEventListener('click', () => bulk('kill', post('kill')));
  $('bulk-archive').addEventListener('click', () => bulk('archive', post('archive')));
  $('bulk-unarchive').addEventListener('click', () => bulk('unarchive', post('unarchive')));
  const labelCall = (field) => () => {
    const l = $('bulk-label').value.trim();
    if (!l) { $('bulk-msg').textContent = 'type a label first'; return; }
    bulk(`${field === 'add_labels' ? 'add' : 'remove'} label ${l}`, (id) => api(`/experiments/${id}`, { method: 'PATCH', body: { [field]: [l] } }));
  };
  $('bulk-add-label').addEventListener('click', labelCall('add_labels'));
  $('bulk-remove-label').addEventListener('click', labelCall('remove_labels'));
  showBulk();
  return async () => {
    // The master filters by state, name, owner and archived; labels are filtered here, over
    // the newest 1000 matches (so pages count what is shown).
    const byLabel = label.value.trim();
    const q = new URLSearchParams(byLabel ? { limit: 1000, offset: 0 } : { limit, offset });
    if (state.value) q.set('states', state.value);
    if (name.value) q.set('name', name.value);
    if (user.value.trim()) q.set('user', user.value.trim());
    if (archived.checked) q.set('include_archived', 'true');
    const r = await api('/experiments?' + q.toString());
    let list = r.experiments || [];
    let total = num(r.total);
    if (byLabel) {
      list = list.filter((e) => (e.labels || []).includes(byLabel));
      total = list.length;
      list = list.slice(offset, offset + limit);
    }
    if (offset >= total && total > 0) offset = Math.floor((total - 1) / limit) * limit;
    shown = list;
    for (const id of [...selected]) if (!list.some((e) => String(e.id) === id)) selected.delete(id);
    showBulk();
    const best = columns.includes('best') || list.some((e) => stateName(e.state) === 'PAUSED') ? await bestOf(list) : null;
    setHtml('experiments', experimentsTable(list, { columns, selectable: true, selected, best }));
    $('f-count').textContent = `${total ? offset + 1 : 0}–${offset + list.length} of ${total}`;
  };
}

function kv(rows) {
  return '<table class="kv"><tbody>' +
    rows.filter(([, v]) => v !== undefined && v !== null && v !== '').map(([k, v]) => `<tr><th>${esc(k)}</th><td>${v}</td></tr>`).join('') +
    '</tbody></table>';
}
