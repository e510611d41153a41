// det's web page: the SVG line charts (loaded before app.js, which draws them with
// these functions; COLORS and esc come from app.js at call time).

function niceStep(range, target) {
  const raw = range / Math.max(1, target);
  const mag = Math.pow(10, Math.floor(Math.log10(raw)));
  const norm = raw / mag;
  const step = norm >= 5 ? 5 : norm >= 2 ? 2 : 1;
  return step * mag;
}

function ticks(lo, hi, target) {
  if (!(hi > lo)) return [lo];
  const step = niceStep(hi - lo, target);
  const out = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(Number(v.toPrecision(12)));
  return out;
}

// series: [{name, points: [[x, y], ...], dashed, dots}]. Returns an SVG chart (HTML text).
function lineChart(title, series, options = {}) {
  const W = 600, H = 260, L = 58, R = 14, T = 10, B = 34;
  const shown = series.filter((s) => s.points.length > 0);
  let html = `<div class="chart" data-title="${esc(title)}"><h3>${esc(title)}</h3>`;
  if (shown.length === 0) {
    return html + '<p class="muted">No data yet.</p></div>';
  }
  let xs = [], ys = [];
  for (const s of shown) for (const [x, y] of s.points) { xs.push(x); ys.push(y); }
  let x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { const d = Math.abs(y0) * 0.1 || 1; y0 -= d; y1 += d; }
  const pad = (y1 - y0) * 0.05;
  y0 -= pad; y1 += pad;
  if (options.zeroBased && y0 > 0 && y0 < (y1 - y0)) y0 = 0;
  const px = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const py = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  let svg = `<svg viewBox="0 0 ${W} ${H}" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="${esc(title)}">`;
  for (const t of ticks(y0, y1, 5)) {
    const y = py(t).toFixed(1);
    svg += `<line class="grid" x1="${L}" x2="${W - R}" y1="${y}" y2="${y}"/>`;
    svg += `<text x="${L - 6}" y="${y}" text-anchor="end" dominant-baseline="middle">${esc(fmt(t))}</text>`;
  }
  for (const t of ticks(x0, x1, 6)) {
    const x = px(t).toFixed(1);
    svg += `<line class="grid" x1="${x}" x2="${x}" y1="${T}" y2="${H - B}"/>`;
    svg += `<text x="${x}" y="${H - B + 14}" text-anchor="middle">${esc(fmt(t))}</text>`;
  }
  svg += `<line class="axis" x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}"/>`;
  svg += `<line class="axis" x1="${L}" x2="${L}" y1="${T}" y2="${H - B}"/>`;
  svg += `<text x="${(L + W - R) / 2}" y="${H - 4}" text-anchor="middle">${esc(options.xLabel || 'batches')}</text>`;
  shown.forEach((s, i) => {
    const color = s.color || COLORS[i % COLORS.length];
    s.color = color;
    const d = s.points.map(([x, y], j) => `${j ? 'L' : 'M'}${px(x).toFixed(1)} ${py(y).toFixed(1)}`).join(' ');
    svg += `<path class="series${s.dashed ? ' dashed' : ''}" d="${d}" stroke="${color}" ` +
      `data-series="${esc(s.name)}" data-points="${s.points.length}" data-last="${esc(s.points[s.points.length - 1][1])}"/>`;
    if (s.dots || s.points.length <= 2) {
      for (const [x, y] of s.points) {
        svg += `<circle cx="${px(x).toFixed(1)}" cy="${py(y).toFixed(1)}" r="3" fill="${color}"><title>${esc(s.name)} at ${esc(fmt(x))}: ${esc(fmt(y))}</title></circle>`;
      }
    }
  });
  svg += '</svg>';
  let legend = '<div class="legend">';
  for (const s of shown) {
    legend += `<span><svg viewBox="0 0 22 10"><line x1="0" x2="22" y1="5" y2="5" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/></svg> ${esc(s.name)}</span>`;
  }
  legend += '</div>';
  return html + svg + legend + '</div>';
}

// Metric rows -> one series per (group, metric) whose name passes `want`.
function seriesFrom(rows, group, want, prefix, dashed) {
  const byName = new Map();
  for (const r of rows) {
    if (r.group !== group) continue;
    for (const [k, v] of Object.entries(r.values || {})) {
      if (!want(k)) continue;
      if (!byName.has(k)) byName.set(k, []);
      byName.get(k).push([num(r.total_batches), num(v)]);
    }
  }
  return [...byName.entries()].map(([k, points]) => ({
    name: `${prefix}${group} ${k}`, points, dashed, dots: group === 'validation',
  }));
}

const isLoss = (k) => /loss/i.test(k);
