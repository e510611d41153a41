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
