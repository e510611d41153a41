// det's web page: the model registry (GET /api/v1/models and /models/{name}/versions).
// #/models lists the models; #/models/NAME shows one model and its versions, each linked to
// its checkpoint's trial and experiment. Versions are registered from an experiment's
// checkpoint table (experiment.js) or with `det model register-version`.
'use strict';

function labelChips(labels) {
  return (labels || []).map((l) => `<span class="label">${esc(l)}</span>`).join(' ');
}

function modelLink(name) {
  return `#/models/${encodeURIComponent(name)}`;
}

// Writes on each row marked `data-mark-box` where it lies on the page (as markChartBoxes
// does for charts): what the browser tests read to find a row in a screenshot.
function markRowBoxes(root) {
  for (const el of root.querySelectorAll('[data-mark-box]')) {
    const r = el.getBoundingClientRect();
    el.setAttribute('data-box', [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height].map((v) => v.toFixed(1)).join(','));
  }
}

async function modelList() {
  $('view').innerHTML = '<h1>Models</h1><div class="toolbar"><label>Label <input id="m-label" placeholder="label" size="10"></label>' +
    '<span id="m-count" class="muted"></span></div><div id="models"></div>';
  const label = $('m-label');
  label.addEventListener('input', () => refreshNow());
  return async () => {
    const want = label.value.trim();
    const r = await api('/models' + (want ? `?labels=${encodeURIComponent(want)}` : ''));
    const models = (r.models || []).slice().sort((a, b) => num(b.last_updated_time_ms) - num(a.last_updated_time_ms));
    $('m-count').textContent = `${models.length} model(s)`;
    if (!models.length) {
      setHtml('models', '<p class="muted">No models. Register a checkpoint from an experiment\'s checkpoint table, or run <code>det model create NAME</code>.</p>');
      return;
    }
    setHtml('models', '<table id="models-table"><thead><tr><th>Name</th><th>Description</th><th>Labels</th>' +
      '<th class="num">Versions</th><th>Owner</th><th>Last updated</th></tr></thead><tbody>' +
      models.map((m) => `<tr class="model-row"><td><a href="${esc(modelLink(m.name))}">${esc(m.name)}</a></td>` +
        `<td>${esc(m.description)}</td><td>${labelChips(m.labels)}</td>` +
        `<td class="num model-versions">${num(m.num_versions)}</td><td>${esc(m.username)}</td>` +
        `<td title="${esc(when(m.last_updated_time_ms))}">${esc(ago(m.last_updated_time_ms))}</td></tr>`).join('') +
      '</tbody></table>');
  };
}

function versionCheckpoint(v) {
  const c = v.checkpoint || {};
  const uuid = `<code>${esc(v.checkpoint_uuid)}</code>`;
  if (!num(c.trial_id)) return uuid;
  const state = stateName(c.state);
  return `<a class="version-checkpoint" href="#/trials/${num(c.trial_id)}">${uuid}</a>` +
    ` <span class="muted">trial <a href="#/trials/${num(c.trial_id)}">${num(c.trial_id)}</a>` +
    ` of experiment <a href="#/experiments/${num(c.experiment_id)}">${num(c.experiment_id)}</a>` +
    `${num(c.total_batches) ? `, batch ${num(c.total_batches)}` : ''}</span>` +
    (state && state !== 'COMPLETED' ? ` ${stateBadge(state)}` : '');
}

async function modelView(name) {
  $('view').innerHTML = `<p><a href="#/models">Models</a></p><h1 id="model-name">${esc(name)}</h1>` +
    '<div id="model-facts"></div><h2>Versions</h2><div id="versions"></div>';
  const path = `/models/${encodeURIComponent(name)}/versions`;
  return async () => {
    const r = await api(path);
    const m = r.model || {};
    const versions = (r.model_versions || []).slice().sort((a, b) => num(b.version) - num(a.version));
    setHtml('model-facts', '<table class="kv">' +
      `<tr><th>Description</th><td id="model-description">${esc(m.description)}</td></tr>` +
      `<tr><th>Labels</th><td>${labelChips(m.labels)}</td></tr>` +
      `<tr><th>Owner</th><td>${esc(m.username)}</td></tr>` +
      `<tr><th>Created</th><td>${esc(when(m.creation_time_ms))}</td></tr>` +
      `<tr><th>Last updated</th><td>${esc(when(m.last_updated_time_ms))} <span class="muted">${esc(ago(m.last_updated_time_ms))}</span></td></tr>` +
      (m.metadata_json ? `<tr><th>Metadata</th><td><code>${esc(m.metadata_json)}</code></td></tr>` : '') +
      '</table>');
    if (!versions.length) {
      setHtml('versions', '<p class="muted">No versions yet: register one from an experiment\'s checkpoint table.</p>');
      return;
    }
    setHtml('versions', '<table id="versions-table"><thead><tr><th class="num">Version</th><th>Checkpoint</th>' +
      '<th>Name</th><th>Comment</th><th>Registered by</th><th>Registered</th></tr></thead><tbody>' +
      versions.map((v) => `<tr class="version-row" data-version="${num(v.version)}" data-mark-box>` +
        `<td class="num"><span class="version-badge">v${num(v.version)}</span></td><td>${versionCheckpoint(v)}</td>` +
        `<td>${esc(v.name)}</td><td class="version-comment">${esc(v.comment)}${v.notes ? `<div class="muted">${esc(v.notes)}</div>` : ''}</td>` +
        `<td>${esc(v.username)}</td><td title="${esc(ago(v.creation_time_ms))}">${esc(when(v.creation_time_ms))}</td></tr>`).join('') +
      '</tbody></table>');
    markRowBoxes($('versions'));
  };
}
