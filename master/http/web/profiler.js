// det's web page: the trial view's Profiler section (#/trials/ID): the trial's timings, under
// Determined's profiler names (a PyTorchTrial's dataloader_next, to_device, train_batch,
// step_lr_schedulers, from_device; any a script times), per report, and the system metrics of its agents (CPU,
// memory, disk, network, GPU) over its run, charted with their units; or, when there is
// nothing to show, why. Loaded after charts.js and metrics.js, before trial.js.
'use strict';

// Samples of an agent taken up to this long before the trial's start or after its end
// still count as the trial's (the agents' clocks are not the master's).
const PROFILER_SLACK_MS = 5000;

// Whether an experiment's effective config (the YAML text the master returns) sets
// `profiling.enabled` true, in block form ("profiling:\n  enabled: true") or in flow form
// ("profiling: {enabled: true}").
function profilingEnabled(configYaml) {
  const m = (yamlSection(configYaml, 'profiling') || '').match(/(?:^|[\s{,])enabled:\s*["']?(true|yes|on)\b/i);
  return !!m;
}

// The timings table: one row per timed operation (mean, p50, p90, p99, max of the latest
// report, and reports), slowest mean first; then the rates.
function timingsTable(summary) {
  const ops = new Map(), rates = [], other = [];
  for (const [k, v] of Object.entries(summary || {})) {
    const m = k.match(/^(.*)_(mean|p50|p90|p99|max)_ms$/) || k.match(/^(.*)_(count)$/);
    if (m) {
      if (!ops.has(m[1])) ops.set(m[1], {});
      ops.get(m[1])[m[2]] = v;
    } else if (/_per_second$/.test(k)) {
      rates.push([k, v]);
    } else {
      other.push([k, v]);
    }
  }
  if (!ops.size && !rates.length && !other.length) return '';
  const rows = [...ops.entries()].sort((a, b) => num(b[1].mean && b[1].mean.last) - num(a[1].mean && a[1].mean.last) || a[0].localeCompare(b[0]));
  const cell = (s) => `<td class="num">${s ? fmtMs(s.last) : ''}</td>`;
  let h = '<table id="timings-table" class="kv"><thead><tr><th>Operation</th><th class="num">Mean</th><th class="num">p50</th><th class="num">p90</th>' +
    '<th class="num">p99</th><th class="num">Max</th><th class="num">Samples (last report)</th><th class="num">Mean over reports</th></tr></thead><tbody>';
  if (rows.length) h += '<tr class="group"><th colspan="8">time per operation (latest report), slowest first</th></tr>';
  for (const [op, s] of rows) {
    h += `<tr><td>${esc(op)}</td>${cell(s.mean)}${cell(s.p50)}${cell(s.p90)}${cell(s.p99)}${cell(s.max)}` +
      `<td class="num">${s.count ? fmt(s.count.last) : ''}</td><td class="num">${s.mean ? `${fmtMs(s.mean.min)} – ${fmtMs(s.mean.max)}` : ''}</td></tr>`;
  }
  if (rates.length) {
    h += '<tr class="group"><th colspan="8">throughput (latest report; lowest – highest)</th></tr>';
    for (const [k, v] of rates.sort((a, b) => a[0].localeCompare(b[0]))) {
      const unit = k.replace(/_per_second$/, '') + '/s';
      h += `<tr><td>${esc(k)}</td><td class="num">${fmtRate(v.last, unit)}</td><td colspan="5"></td><td class="num">${fmtRate(v.min, unit)} – ${fmtRate(v.max, unit)}</td></tr>`;
    }
  }
  if (other.length) {
    h += '<tr class="group"><th colspan="8">other</th></tr>';
    for (const [k, v] of other.sort((a, b) => a[0].localeCompare(b[0]))) {
      h += `<tr><td>${esc(k)}</td><td class="num">${fmt(v.last)}</td><td colspan="5"></td><td class="num">${fmt(v.min)} – ${fmt(v.max)}</td></tr>`;
    }
  }
  return h + '</tbody></table>';
}

// The charts of the "timings" rows of a trial's metrics (x: batches): one per timed
// operation, its p99 (dashed) and mean time per report ("Time in train_batch (ms)"), and
// one per rate ("samples_per_second" -> "Throughput (samples/s)").
function timingCharts(rows) {
  const ops = new Map(), rates = new Map();
  const point = (map, name, key, r, v) => {
    if (!map.has(name)) map.set(name, new Map());
    const series = map.get(name);
    if (!series.has(key)) series.set(key, []);
    series.get(key).push([num(r.total_batches), num(v)]);
  };
  for (const r of rows) {
    if (r.group !== 'timings') continue;
    for (const [k, v] of Object.entries(r.values || {})) {
      let m = k.match(/^(.*)_(mean|p99)_ms$/);
      if (m) point(ops, m[1], m[2], r, v);
      else if ((m = k.match(/^(.*)_per_second$/))) point(rates, m[1], 'rate', r, v);
    }
  }
  const sorted = (map) => [...map.entries()].sort((a, b) => a[0].localeCompare(b[0]));
  let h = '';
  for (const [op, series] of sorted(ops)) {
    // The mean drawn last, over the p99 where they meet.
    h += lineChart(`Time in ${op} (ms)`, [
      { name: 'p99', points: series.get('p99') || [], dashed: true },
      { name: 'mean', points: series.get('mean') || [] },
    ], { log: prefs.log });
  }
  for (const [unit, series] of sorted(rates)) {
    h += lineChart(`Throughput (${unit}/s)`, [{ name: `${unit}/s`, points: series.get('rate') }], { zeroBased: true });
  }
  return h;
}

// The system-metric charts of `samples` (SystemMetrics, oldest first per agent; x: seconds
// since `t0Ms`): one series per agent (per agent and GPU for GPU metrics; read/write and
// sent/received as two series per agent, the second dashed).
function systemCharts(samples, t0Ms) {
  const agents = new Map();
  const add = (title, name, x, y, dashed) => {
    if (!agents.has(title)) agents.set(title, new Map());
    const byName = agents.get(title);
    if (!byName.has(name)) byName.set(name, { name, points: [], dashed });
    byName.get(name).points.push([x, y]);
  };
  const GiB = 2 ** 30, MB = 1e6;
  for (const s of samples) {
    const a = s.agent_id, x = (num(s.time_ms) - t0Ms) / 1000;
    add('CPU utilisation (%)', a, x, num(s.cpu_utilization_percent));
    add('Memory used (GiB)', a, x, (num(s.memory_total_bytes) - num(s.memory_free_bytes)) / GiB);
    add('Disk throughput (MB/s)', `${a} read`, x, num(s.disk_read_bytes_per_second) / MB);
    add('Disk throughput (MB/s)', `${a} write`, x, num(s.disk_write_bytes_per_second) / MB, true);
    add('Network throughput (MB/s)', `${a} received`, x, num(s.network_received_bytes_per_second) / MB);
    add('Network throughput (MB/s)', `${a} sent`, x, num(s.network_sent_bytes_per_second) / MB, true);
    for (const g of s.gpus || []) {
      add('GPU utilisation (%)', `${a} gpu ${g.slot_id}`, x, num(g.utilization_percent));
      add('GPU memory used (GiB)', `${a} gpu ${g.slot_id}`, x, (num(g.memory_total_bytes) - num(g.memory_free_bytes)) / GiB);
    }
  }
  const xLabel = 'seconds since the trial started';
  return [...agents.entries()].map(([title, byName]) =>
    lineChart(title, [...byName.values()], { xLabel, zeroBased: true })).join('');
}

// The Profiler section of trial `t` (GetTrial's trial), from its metric rows (`rows`, the
// "timings" group among them), the recent samples of its agents (`samples`, GetTrial's
// system_metrics) and whether its experiment's config turns profiling on (`enabled`: true,
// false, or null while unknown). Returns HTML.
function profilerHtml(t, rows, samples, enabled) {
  const start = num(t.start_time_ms), end = num(t.end_time_ms) || Date.now();
  const run = start ? samples.filter((s) => num(s.time_ms) >= start - PROFILER_SLACK_MS && num(s.time_ms) <= end + PROFILER_SLACK_MS) : [];
  const table = timingsTable(t.timings_summary);
  const charts = timingCharts(rows);
  const hasTimings = !!(table || charts);
  let h = '<p id="profiler-state">';
  if (enabled) {
    h += 'Profiling <b>on</b> (<code>profiling.enabled: true</code> in the experiment\'s config): the trial\'s timings per report and the system metrics of its agents.';
  } else if (enabled === false) {
    h += 'Profiling <b>off</b> (<code>profiling.enabled</code> is not true in the experiment\'s config)' +
      (hasTimings ? '; det reports the timings of every det.core trial all the same.' : '.');
  }
  h += '</p>';
  if (!hasTimings && !run.length) {
    const why = enabled === false
      ? 'Profiling was off for this trial: there are no timings or system metrics to show. ' +
        'Set <code>profiling: {enabled: true}</code> in the experiment\'s config to record them.'
      : !start ? 'No profiler data yet: the trial has not started.'
        : 'No profiler data yet: timings come with the trial\'s first training report, system metrics with its agents\' samples.';
    return h + `<p id="profiler-empty" class="muted">${why}</p>`;
  }
  h += '<h3>Timings</h3><div id="timings">' + (hasTimings ? table + `<div class="charts">${charts}</div>`
    : '<p class="muted">No timings reported yet: they come with each training report.</p>') + '</div>';
  h += '<h3>System metrics</h3><div class="charts" id="system">';
  if (run.length) {
    h += systemCharts(run, start);
  } else if (samples.length) {
    const agents = [...new Set(samples.map((s) => s.agent_id))].join(', ');
    h += `<p class="muted">No system metrics from this trial's run: the master keeps the latest samples of each agent for this page, and those of ${esc(agents)} were taken after the trial ended.</p>`;
  } else {
    h += '<p class="muted">No system metrics: the trial\'s agents sent none (agent.yaml <code>system_metrics_period</code>; 0 turns sampling off).</p>';
  }
  return h + '</div>';
}
