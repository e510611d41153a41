// det's web page: a client of the master's REST API (/api/v1/). No libraries; plots are
// SVG drawn by charts.js. Views: #/ (cluster.js), #/experiments (cluster.js),
// #/experiments/ID (experiment.js), #/experiments/ID/compare?trials=A,B,C (search.js),
// #/trials/ID (trial.js), #/models and #/models/NAME (models.js); helpers in util.js and metrics.js. This file: login and navigation, loaded last. Every view refreshes itself
// every few seconds; trial logs follow with long polls.
'use strict';

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
    if (gen === generation) markChartBoxes();
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
    (a.dataset.nav === 'overview' && path === '/') || (a.dataset.nav === 'experiments' && path.startsWith('/experiments')) ||
    (a.dataset.nav === 'models' && path.startsWith('/models'))));
  let m;
  try {
    if ((m = path.match(/^\/experiments\/(\d+)$/))) currentRefresh = await experimentView(m[1], params);
    else if ((m = path.match(/^\/experiments\/(\d+)\/compare$/))) currentRefresh = await compareView(m[1], params);
    else if ((m = path.match(/^\/trials\/(\d+)$/))) currentRefresh = await trialView(m[1], params);
    else if (path === '/experiments') currentRefresh = await experimentList(params);
    else if (path === '/models') currentRefresh = await modelList();
    else if ((m = path.match(/^\/models\/(.+)$/))) currentRefresh = await modelView(decodeURIComponent(m[1]));
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
