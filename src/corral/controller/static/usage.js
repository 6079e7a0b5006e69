// corral dashboard: the Usage page. What each project used per day over a window, as a stacked bar chart in
// inline SVG (no charting library), and the usage table by project, user or pool with its TOTAL row. Loaded
// after app.js, whose helpers (h, fill, getJSON, liveView) it uses; route() in app.js calls usageView.
"use strict";

const USAGE_METRICS = {
  cpu: {label: "CPU hours", pick: (row) => row.cpu_seconds, scale: 3600},
  gpu: {label: "GPU hours", pick: (row) => row.gpu_seconds, scale: 3600},
  memory: {label: "memory GiB-hours", pick: (row) => row.memory_byte_seconds, scale: 3600 * 2 ** 30},
  cost: {label: "cost", pick: (row) => row.cost, scale: 1},
};
const USAGE_WINDOWS = ["7d", "30d", "90d"];
const USAGE_COLOURS = ["#0969da", "#1a7f37", "#bc4c00", "#8250df", "#cf222e", "#9a6700", "#1b7c83", "#57606a"];

function usageView(view, params) {
  const choice = {
    since: USAGE_WINDOWS.includes(params.get("since")) ? params.get("since") : "30d",
    by: ["project", "user", "pool"].includes(params.get("by")) ? params.get("by") : "project",
    metric: params.get("metric") in USAGE_METRICS ? params.get("metric") : "cpu",
  };
  const go = (change) => { location.hash = `#/usage?${new URLSearchParams({...choice, ...change})}`; };
  const select = (id, label, value, options, key) => h("label", {for: id}, label,
    h("select", {id, onchange: (e) => go({[key]: e.target.value})},
      options.map(([v, text]) => h("option", {value: v, selected: v === value}, text))));
  const body = h("div");
  view.append(h("h1", {}, "Usage"), h("div", {class: "filters"},
    select("usage-since", "Window", choice.since, USAGE_WINDOWS.map((w) => [w, `last ${w}`]), "since"),
    select("usage-metric", "Chart", choice.metric, Object.entries(USAGE_METRICS).map(([k, m]) => [k, m.label]), "metric"),
    select("usage-by", "Table by", choice.by, ["project", "user", "pool"].map((b) => [b, b]), "by")), body);
  return liveView(body, async () => {
    const query = new URLSearchParams({since: choice.since});
    const [daily, usage] = await Promise.all([
      getJSON(`/usage/series?${query}&by=project&bucket=day`), getJSON(`/usage?${query}&by=${choice.by}`)]);
    fill(body, usageChart(daily, choice.metric), usageTable(usage));
  }, {relevant: () => false, every: 60000});
}

/** Bars per day, one segment per project, stacked; a legend and a text summary for screen readers. */
function usageChart(daily, metricName) {
  const metric = USAGE_METRICS[metricName];
  const card = h("section", {class: "card usage-chart", "aria-labelledby": "usage-chart-title"},
    h("h2", {id: "usage-chart-title"}, `${metric.label} per day, by project`));
  if (metricName === "cost" && !daily.currency) {
    card.append(h("p", {class: "muted"}, "No prices are configured: usage has no cost."));
    return card;
  }
  const rows = daily.rows.map((row, i) => ({key: row.key, colour: USAGE_COLOURS[i % USAGE_COLOURS.length],
    values: (metric.pick(row) || []).map((v) => v / metric.scale)}));
  const days = daily.starts.length;
  const totals = daily.starts.map((_, day) => rows.reduce((sum, row) => sum + (row.values[day] || 0), 0));
  const peak = Math.max(0, ...totals);
  const width = 800, height = 220, pad = 28, step = (width - pad) / Math.max(days, 1);
  const ns = "http://www.w3.org/2000/svg";
  const el = (tag, attrs) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    return node;
  };
  const svg = el("svg", {viewBox: `0 0 ${width} ${height + 18}`, role: "img", "data-usage-chart": "",
    "aria-label": `${metric.label} per day over ${days} days: ${rows.map((r) => `${r.key} ${usageRound(usageSum(r.values))}`).join(", ") || "none"}`});
  svg.append(el("line", {x1: pad, y1: height, x2: width, y2: height, class: "axis"}));
  const label = el("text", {x: 0, y: 12, class: "tick"});
  label.textContent = usageRound(peak);
  svg.append(label);
  for (let day = 0; day < days; day++) {
    let top = height;
    for (const row of rows) {
      const value = row.values[day] || 0;
      if (!value || !peak) continue;
      const tall = (value / peak) * (height - 16);
      top -= tall;
      const bar = el("rect", {x: pad + day * step + 1, y: top, width: Math.max(step - 2, 1), height: tall,
        fill: row.colour, "data-project": row.key});
      const tip = el("title", {});
      tip.textContent = `${row.key} · ${new Date(daily.starts[day] * 1000).toLocaleDateString()} · ${usageRound(value)} ${metric.label}`;
      bar.append(tip);
      svg.append(bar);
    }
  }
  for (const [day, x, anchor] of [[0, pad, "start"], [days - 1, width, "end"]].slice(0, Math.min(days, 2))) {
    const tick = el("text", {x, y: height + 14, class: "tick", "text-anchor": anchor});
    tick.textContent = new Date(daily.starts[day] * 1000).toLocaleDateString();
    svg.append(tick);
  }
  card.append(svg, rows.length
    ? h("ul", {class: "legend", "aria-label": "projects"}, rows.map((row) => h("li", {},
      h("span", {class: "swatch", style: `background:${row.colour}`}), `${row.key} · ${usageRound(usageSum(row.values))}`)))
    : h("p", {class: "muted"}, "Nothing ran in this window."));
  return card;
}

function usageTable(usage) {
  const money = (v) => (v === null || v === undefined ? "-" : `${v.toFixed(2)} ${usage.currency}`);
  const cells = (row) => [h("td", {class: "num"}, row.attempts), h("td", {class: "num"}, usageRound(row.cpu_seconds / 3600)),
    h("td", {class: "num"}, usageRound(row.memory_byte_seconds / 3600 / 2 ** 30)), h("td", {class: "num"}, usageRound(row.gpu_seconds / 3600)),
    usage.currency ? h("td", {class: "num"}, money(row.cost)) : null];
  const columns = [usage.by, "attempts", "CPU hours", "memory GiB-hours", "GPU hours", usage.currency ? "cost" : null]
    .filter(Boolean);
  return h("section", {class: "card", "aria-labelledby": "usage-table-title"},
    h("h2", {id: "usage-table-title"}, `By ${usage.by}, ${new Date(usage.since * 1000).toLocaleDateString()} to ${new Date(usage.until * 1000).toLocaleDateString()}`),
    h("table", {"aria-label": `usage by ${usage.by}`},
      h("thead", {}, h("tr", {}, columns.map((c, i) => h("th", {scope: "col", class: i ? "num" : null}, c)))),
      h("tbody", {}, usage.rows.map((row) => h("tr", {"data-key": row.key}, h("td", {}, row.key), cells(row)))),
      h("tfoot", {}, h("tr", {"data-key": "TOTAL"}, h("th", {scope: "row"}, "TOTAL"), cells(usage.totals)))));
}

const usageSum = (values) => values.reduce((a, b) => a + b, 0);
const usageRound = (n) => String(Math.round(n * 100) / 100);
