// det's web page: the SVG charts (loaded after util.js, whose COLORS, esc and fmt they
// use, and before the views that draw them).
'use strict';

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

// A y (or x) axis over the values `vs`: {lo, hi, ticks, pos(v) -> 0..1, log}. With `log`,
// a log10 axis over the positive values (the others cannot be drawn on it). Values all in
// [0, 1] (accuracies, fractions) keep the axis within [0, 1].
function axis(vs, options = {}) {
  const log = !!options.log;
  const finite = vs.filter((v) => Number.isFinite(v) && (!log || v > 0));
  if (!finite.length) return null;
  let lo = Math.min(...finite), hi = Math.max(...finite);
  if (log) {
    let a = Math.log10(lo), b = Math.log10(hi);
    if (b === a) { a -= 0.5; b += 0.5; }
    const pad = (b - a) * 0.05;
    a -= pad; b += pad;
    let ts;
    if (b - a >= 1) {
      const step = Math.max(1, Math.ceil((b - a) / 6));
      ts = [];
      for (let k = Math.ceil(a); k <= Math.floor(b); k += step) ts.push(Math.pow(10, k));
    } else {
      ts = ticks(Math.pow(10, a), Math.pow(10, b), 4).filter((t) => t > 0);
    }
    return { lo: Math.pow(10, a), hi: Math.pow(10, b), ticks: ts, log: true, pos: (v) => (Math.log10(v) - a) / (b - a) };
  }
  const unit = lo >= 0 && hi <= 1;
  if (hi === lo) { const d = Math.abs(lo) * 0.1 || 0.5; lo -= d; hi += d; }
  const pad = (hi - lo) * 0.05;
  lo -= pad; hi += pad;
  if (options.zeroBased && lo > 0 && lo < hi - lo) lo = 0;
  if (unit) { lo = Math.max(0, lo); hi = Math.min(1, hi); }
  const ts = ticks(lo, hi, options.ticks || 5);
  return { lo, hi, ticks: ts, log: false, pos: (v) => (v - lo) / (hi - lo) };
}

const CHART = { W: 600, H: 260, L: 62, R: 14, T: 10, B: 34 };

function frame(title, svgBody, legend, extra) {
  return `<div class="chart" data-title="${esc(title)}"${extra || ''}><h3>${esc(title)}</h3>` +
    `<svg viewBox="0 0 ${CHART.W} ${CHART.H}" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="${esc(title)}">` +
    svgBody + '</svg>' + legend + '</div>';
}

// The grid, tick labels and axis lines of a chart; `ya` and `xa` from axis(), or `xa` with
// `categories` for a categorical x axis.
function gridAndAxes(ya, xa, px, py, xLabel, yLabel) {
  const { W, H, L, R, T, B } = CHART;
  let svg = '';
  for (const t of ya.ticks) {
    const y = py(t).toFixed(1);
    svg += `<line class="grid" x1="${L}" x2="${W - R}" y1="${y}" y2="${y}"/>`;
    svg += `<text class="ytick" x="${L - 6}" y="${y}" text-anchor="end" dominant-baseline="middle">${esc(fmt(t))}</text>`;
  }
  if (xa.categories) {
    xa.categories.forEach((c, i) => {
      const x = px(i).toFixed(1);
      svg += `<text class="xtick" x="${x}" y="${H - B + 14}" text-anchor="middle">${esc(c)}</text>`;
    });
  } else {
    for (const t of xa.ticks) {
      const x = px(t).toFixed(1);
      svg += `<line class="grid" x1="${x}" x2="${x}" y1="${T}" y2="${H - B}"/>`;
      svg += `<text class="xtick" x="${x}" y="${H - B + 14}" text-anchor="middle">${esc(fmt(t))}</text>`;
    }
  }
  svg += `<line class="axis" x1="${L}" x2="${W - R}" y1="${H - B}" y2="${H - B}"/>`;
  svg += `<line class="axis" x1="${L}" x2="${L}" y1="${T}" y2="${H - B}"/>`;
  svg += `<text x="${(L + W - R) / 2}" y="${H - 4}" text-anchor="middle">${esc(xLabel)}</text>`;
  if (yLabel) svg += `<text x="12" y="${(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 12 ${(T + H - B) / 2})">${esc(yLabel)}</text>`;
  return svg;
}

// series: [{name, points: [[x, y], ...], dashed, dots, color}]. options: xLabel,
// zeroBased, log (log10 y axis). Returns a chart (HTML text).
function lineChart(title, series, options = {}) {
  const { W, H, L, R, T, B } = CHART;
  const shown = series.filter((s) => s.points.length > 0);
  if (shown.length === 0) {
    return `<div class="chart" data-title="${esc(title)}"><h3>${esc(title)}</h3><p class="muted">No data yet.</p></div>`;
  }
  const xs = [], ys = [];
  for (const s of shown) for (const [x, y] of s.points) { xs.push(x); ys.push(y); }
  const ya = axis(ys, { log: options.log, zeroBased: options.zeroBased });
  if (!ya) {
    return `<div class="chart" data-title="${esc(title)}"><h3>${esc(title)}</h3><p class="muted">No positive values to draw on a log scale.</p></div>`;
  }
  let x0 = Math.min(...xs), x1 = Math.max(...xs);
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  const xa = { ticks: ticks(x0, x1, 6) };
  const px = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const py = (y) => T + (1 - ya.pos(y)) * (H - T - B);
  const drawable = (y) => Number.isFinite(y) && (!ya.log || y > 0);
  let svg = gridAndAxes(ya, xa, px, py, options.xLabel || 'batches', '');
  let hidden = 0;
  shown.forEach((s, i) => {
    const color = s.color || COLORS[i % COLORS.length];
    s.color = color;
    const pts = s.points.filter(([, y]) => drawable(y));
    hidden += s.points.length - pts.length;
    if (!pts.length) return;
    const d = pts.map(([x, y], j) => `${j ? 'L' : 'M'}${px(x).toFixed(1)} ${py(y).toFixed(1)}`).join(' ');
    svg += `<path class="series${s.dashed ? ' dashed' : ''}" d="${d}" stroke="${color}" ` +
      `data-series="${esc(s.name)}" data-points="${pts.length}" data-last="${esc(pts[pts.length - 1][1])}"/>`;
    if (s.dots || pts.length <= 2) {
      for (const [x, y] of pts) {
        svg += `<circle cx="${px(x).toFixed(1)}" cy="${py(y).toFixed(1)}" r="3" fill="${color}"><title>${esc(s.name)} at ${esc(fmt(x))}: ${esc(fmt(y))}</title></circle>`;
      }
    }
  });
  let legend = '<div class="legend">';
  for (const s of shown) {
    legend += `<span><svg viewBox="0 0 22 10"><line x1="0" x2="22" y1="5" y2="5" stroke="${s.color}" stroke-width="2"${s.dashed ? ' stroke-dasharray="6 4"' : ''}/></svg> ${esc(s.name)}</span>`;
  }
  if (hidden) legend += `<span class="muted">${hidden} value(s) ≤ 0 not drawn on the log scale</span>`;
  legend += '</div>';
  return frame(title, svg, legend, ya.log ? ' data-scale="log"' : ' data-scale="linear"');
}

// A scatter of points [{x, y, label, best}]: x numeric (log10 axis when `logX`) or, when
// `categorical`, any text placed evenly in sorted order. options: xLabel, yLabel, log (y).
function scatterChart(title, points, options = {}) {
  const { W, H, L, R, T, B } = CHART;
  const shown = points.filter((p) => Number.isFinite(p.y) && (!options.log || p.y > 0));
  if (!shown.length) {
    return `<div class="chart" data-title="${esc(title)}"><h3>${esc(title)}</h3><p class="muted">No trial has a value of the metric yet.</p></div>`;
  }
  const ya = axis(shown.map((p) => p.y), { log: options.log });
  let xa, px;
  const numeric = !options.categorical && shown.every((p) => typeof p.x === 'number' && Number.isFinite(p.x));
  if (numeric) {
    const xs = shown.map((p) => p.x);
    const logX = xs.every((x) => x > 0) && Math.max(...xs) / Math.min(...xs) >= 100;
    xa = axis(xs, { log: logX, ticks: 6 });
    px = (x) => L + 12 + xa.pos(x) * (W - L - R - 24);
  } else {
    const cats = [...new Set(shown.map((p) => String(p.x)))].sort();
    xa = { categories: cats };
    px = (i) => L + ((i + 0.5) / cats.length) * (W - L - R);
    for (const p of shown) p.xi = cats.indexOf(String(p.x));
  }
  const py = (y) => T + (1 - ya.pos(y)) * (H - T - B);
  let svg = gridAndAxes(ya, xa, px, py, options.xLabel || '', options.yLabel || '');
  for (const p of shown) {
    const cx = (numeric ? px(p.x) : px(p.xi)).toFixed(1), cy = py(p.y).toFixed(1);
    svg += `<circle class="point${p.best ? ' best' : ''}" cx="${cx}" cy="${cy}" r="${p.best ? 6 : 4}" ` +
      `data-label="${esc(p.label)}" data-y="${esc(p.y)}"><title>${esc(p.label)}: ${esc(fmt(p.y))}</title></circle>`;
    svg += `<text class="point-label" x="${(Number(cx) + 8).toFixed(1)}" y="${(Number(cy) - 6).toFixed(1)}">${esc(p.label)}</text>`;
  }
  return frame(title, svg, '', ` data-kind="scatter"${numeric && xa.log ? ' data-xscale="log"' : ''}`);
}

// Metric rows -> one series per metric of `group` whose name passes `want`.
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
    name: `${prefix}${group} ${k}`, metric: k, points, dashed, dots: group === 'validation',
  }));
}

// Parallel coordinates: one vertical axis per dimension, one polyline per trial through
// its values. dims: [{name, values: [v per line]}], numbers (a log10 axis when all are
// positive and span 100x or more) or any text (categories evenly spaced in sorted order);
// the last dimension is the metric that colours the lines (`smallerIsBetter`: which end
// is good). lines: [{id, label, best, selected}], in the order of the dims' values.
const PC = { W: 1000, H: 330, L: 70, R: 70, T: 36, B: 14 };

function parallelChart(title, dims, lines, options = {}) {
  const { W, H, L, R, T, B } = PC;
  if (dims.length < 2 || !lines.length) {
    return `<div class="chart wide" data-title="${esc(title)}"><h3>${esc(title)}</h3><p class="muted">No trial has a value of the metric yet.</p></div>`;
  }
  const scales = dims.map((d) => {
    const numeric = d.values.every((v) => typeof v === 'number' && Number.isFinite(v));
    if (numeric) {
      const logScale = d.values.every((v) => v > 0) && Math.max(...d.values) / Math.min(...d.values) >= 100;
      const a = axis(d.values, { log: logScale, ticks: 4 });
      return { pos: a.pos, ticks: a.ticks.map((t) => [a.pos(t), fmt(t)]), log: logScale };
    }
    const cats = [...new Set(d.values.map((v) => (typeof v === 'string' ? v : JSON.stringify(v))))].sort();
    const pos = (v) => (cats.indexOf(typeof v === 'string' ? v : JSON.stringify(v)) + 0.5) / cats.length;
    return { pos, ticks: cats.map((c) => [pos(c), c]), log: false };
  });
  const ax = (i) => L + (i * (W - L - R)) / (dims.length - 1);
  const ay = (p) => T + (1 - p) * (H - T - B);
  let svg = '';
  // Colour by the metric: pale for the worst value, dark for the best; the best trial on top.
  const last = dims.length - 1;
  const good = (k) => { const p = scales[last].pos(dims[last].values[k]); return options.smallerIsBetter ? 1 - p : p; };
  const mix = (t) => {
    const a = [0xc3, 0xcf, 0xe2], b = [0x1b, 0x3a, 0x6b];
    return '#' + a.map((c, j) => Math.round(c + (b[j] - c) * Math.min(1, Math.max(0, t))).toString(16).padStart(2, '0')).join('');
  };
  const order = lines.map((l, k) => k).sort((p, q) => (lines[p].best - lines[q].best) || (lines[p].selected - lines[q].selected) || good(p) - good(q));
  for (const k of order) {
    const l = lines[k];
    const pts = dims.map((d, i) => `${ax(i).toFixed(1)},${ay(scales[i].pos(d.values[k])).toFixed(1)}`).join(' ');
    const color = l.best ? '#d9480f' : l.selected ? '#111111' : mix(good(k));
    const cls = ['pc-line', l.best ? 'best' : '', l.selected ? 'selected' : ''].filter(Boolean).join(' ');
    svg += `<polyline class="${cls}" points="${pts}" stroke="${color}" data-trial="${esc(l.id)}" data-metric="${esc(dims[last].values[k])}">` +
      `<title>${esc(l.label)}: ${esc(dims[last].name)} ${esc(fmt(dims[last].values[k]))}</title></polyline>`;
  }
  // The axes over the lines, then their labels.
  dims.forEach((d, i) => {
    const x = ax(i).toFixed(1);
    svg += `<line class="pc-axis" x1="${x}" x2="${x}" y1="${T}" y2="${H - B}" data-dim="${esc(d.name)}"${scales[i].log ? ' data-scale="log"' : ''}/>`;
  });
  dims.forEach((d, i) => {
    const x = ax(i);
    const anchor = i === 0 ? 'start' : i === last ? 'end' : 'middle';
    svg += `<text class="pc-name" x="${x.toFixed(1)}" y="${T - 20}" text-anchor="${anchor}">${esc(d.name)}${scales[i].log ? ' (log)' : ''}</text>`;
    for (const [p, label] of scales[i].ticks) {
      svg += `<text class="pc-tick" x="${(x - 5).toFixed(1)}" y="${ay(p).toFixed(1)}" text-anchor="end" dominant-baseline="middle">${esc(label)}</text>`;
    }
  });
  return `<div class="chart wide" data-title="${esc(title)}" data-kind="parallel"><h3>${esc(title)}</h3>` +
    `<svg viewBox="0 0 ${W} ${H}" xmlns="http://www.w3.org/2000/svg" role="img" aria-label="${esc(title)}">${svg}</svg>` +
    '<div class="legend"><span>darker: better; <span class="best-swatch">orange</span>: best trial; black: selected; click a line to select its trial</span></div></div>';
}

// Writes on each chart's <svg> where it lies on the page, "left,top,width,height" in CSS
// pixels (data-box): what the browser tests read to find a chart in a screenshot.
function markChartBoxes() {
  for (const svg of document.querySelectorAll('.chart > svg')) {
    const r = svg.getBoundingClientRect();
    svg.setAttribute('data-box', [r.left + window.scrollX, r.top + window.scrollY, r.width, r.height].map((v) => v.toFixed(1)).join(','));
  }
}
