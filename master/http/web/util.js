// det's web page: shared helpers (escaping, numbers, times, the REST client, the status line).
// Loaded first; every other script of the page uses these globals.
'use strict';

const POLL_MS = 3000;
const TOKEN_KEY = 'det_token';
const COLORS = ['#2f6fdf', '#d9480f', '#2b8a3e', '#862e9c', '#c2255c', '#0b7285', '#5c940d', '#e67700'];
// One colour per trial of an experiment (by its position among the experiment's trials, so
// a trial keeps its colour in every chart and in the compare view); 20 colours far apart,
// then they repeat.
const TRIAL_COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2',
  '#17becf', '#bcbd22', '#000080', '#ffbb00', '#00ff7f', '#ff00ff', '#800000', '#008080', '#556b2f',
  '#ff69b4', '#4b0082', '#a0522d', '#7fff00'];

function trialColor(index) {
  return TRIAL_COLORS[index % TRIAL_COLORS.length];
}

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

// A number for people: integers whole (below 1e9), others with 4 significant digits.
function fmt(v) {
  const n = Number(v);
  if (!Number.isFinite(n)) return esc(v);
  if (n === 0) return '0';
  const a = Math.abs(n);
  if (Number.isInteger(n) && a < 1e9) return String(n);
  const r = Number(n.toPrecision(4));
  if (a >= 1e9 || a < 1e-4) return r.toExponential();
  return String(r);
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
