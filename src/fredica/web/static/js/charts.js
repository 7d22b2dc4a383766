// 图表 /charts: throughput, queue depth and per-type durations over a window
// (GET /api/v1/stats/timeseries), drawn as small hand-made SVG line charts.

import { get } from "./api.js";
import { addStrings, t, typeName } from "./i18n.js";
import { clear, h } from "./dom.js";

addStrings({
  zh: {
    "nav.charts": "图表",
    "charts.title": "图表",
    "charts.window": "时间范围",
    "charts.throughput": "吞吐量（每分钟完成任务数）",
    "charts.queue": "队列深度",
    "charts.pending": "待处理",
    "charts.running": "进行中",
    "charts.durations": "各类型任务耗时（秒，平均）",
    "charts.no_durations": "此时间范围内没有完成的任务",
    "charts.totals": "完成 {completed} · 失败 {failed}",
    "charts.truncated": "事件过多，只统计了较早的一部分",
  },
  en: {
    "nav.charts": "Charts",
    "charts.title": "Charts",
    "charts.window": "Window",
    "charts.throughput": "Throughput (tasks completed per minute)",
    "charts.queue": "Queue depth",
    "charts.pending": "pending",
    "charts.running": "running",
    "charts.durations": "Duration per task type (seconds, mean)",
    "charts.no_durations": "No task completed in this window",
    "charts.totals": "completed {completed} · failed {failed}",
    "charts.truncated": "Too many events: only the earlier part is counted",
  },
});

const WINDOWS = ["15m", "1h", "6h", "24h", "7d"];
const COLORS = ["#3b6ef5", "#27ae60", "#e9a100", "#e5484d", "#9b51e0", "#2db3c9", "#5f6775"];
const W = 600;
const H = 160;
const PAD = { left: 36, right: 8, top: 8, bottom: 20 };
const REFRESH_MS = 15000;

const svg = (tag, attrs = {}, ...children) => h(`svg:${tag}`, attrs, ...children);

/** One SVG line chart: `lines` = [{name, color, values: [number|null]}] over `times`. */
function lineChart(times, lines) {
  const values = lines.flatMap((l) => l.values).filter((v) => v !== null);
  const top = Math.max(1, ...values);
  const x = (i) => PAD.left + (i * (W - PAD.left - PAD.right)) / Math.max(1, times.length - 1);
  const y = (v) => PAD.top + (1 - v / top) * (H - PAD.top - PAD.bottom);
  const root = svg("svg", {
    viewBox: `0 0 ${W} ${H}`,
    class: "chart",
    role: "img",
  });
  for (const v of [0, top / 2, top]) {
    root.append(
      svg("line", { x1: PAD.left, x2: W - PAD.right, y1: y(v), y2: y(v), class: "chart-grid" }),
      svg(
        "text",
        { x: PAD.left - 4, y: y(v) + 4, class: "chart-axis", "text-anchor": "end" },
        fmt(v),
      ),
    );
  }
  const ticks = [0, Math.floor((times.length - 1) / 2), times.length - 1];
  for (const i of new Set(ticks)) {
    root.append(
      svg(
        "text",
        {
          x: x(i),
          y: H - 4,
          class: "chart-axis",
          "text-anchor": i === 0 ? "start" : i === times.length - 1 ? "end" : "middle",
        },
        clock(times[i], times[times.length - 1] - times[0] > 86400),
      ),
    );
  }
  for (const line of lines) {
    // a null breaks the line (no task of that type completed in the bucket)
    let d = "";
    let pen = false;
    line.values.forEach((v, i) => {
      if (v === null) {
        pen = false;
        return;
      }
      d += `${pen ? "L" : "M"}${x(i).toFixed(1)},${y(v).toFixed(1)} `;
      pen = true;
    });
    const path = svg("path", { d: d.trim(), class: "chart-line", stroke: line.color });
    path.append(svg("title", {}, line.name));
    root.append(path);
    line.values.forEach((v, i) => {
      if (
        v !== null &&
        (line.values[i - 1] ?? null) === null &&
        (line.values[i + 1] ?? null) === null
      ) {
        root.append(svg("circle", { cx: x(i), cy: y(v), r: 2.5, fill: line.color }));
      }
    });
  }
  return root;
}

function clock(ts, withDate) {
  const d = new Date(ts * 1000);
  const hm = `${String(d.getHours()).padStart(2, "0")}:${String(d.getMinutes()).padStart(2, "0")}`;
  return withDate ? `${d.getMonth() + 1}-${d.getDate()} ${hm}` : hm;
}

function fmt(v) {
  return v >= 100 ? String(Math.round(v)) : String(Math.round(v * 10) / 10);
}

function legend(lines) {
  return h(
    "div",
    { class: "chart-legend" },
    lines.map((l) =>
      h("span", { class: "chart-key" }, h("i", { style: `background:${l.color}` }), l.name),
    ),
  );
}

function card(id, title, ...content) {
  return h(
    "section",
    { class: "card chart-card", id },
    h("div", { class: "card-head" }, h("h2", {}, title)),
    ...content,
  );
}

export function renderCharts(app) {
  let windowValue = sessionStorage.getItem("fredica.charts.window") || "1h";
  const select = h(
    "select",
    { name: "window", "aria-label": t("charts.window") },
    WINDOWS.map((w) => h("option", { value: w, selected: w === windowValue }, w)),
  );
  const totals = h("span", { class: "muted charts-totals" });
  const grid = h("div", { class: "charts-grid" });
  app.append(
    h(
      "section",
      { class: "page page-charts" },
      h(
        "div",
        { class: "page-head" },
        h("h1", {}, t("charts.title")),
        h("div", { class: "spacer" }),
        totals,
        h("label", { class: "inline" }, h("span", {}, t("charts.window")), select),
      ),
      grid,
    ),
  );

  let alive = true;
  async function load() {
    let data;
    try {
      data = await get(`/api/v1/stats/timeseries?window=${encodeURIComponent(windowValue)}`);
    } catch (err) {
      clear(grid).append(h("p", { class: "dialog-error" }, err.message));
      return;
    }
    if (!alive) return;
    const sum = (a) => a.reduce((x, y) => x + y, 0);
    totals.textContent = t("charts.totals", {
      completed: sum(data.completed),
      failed: sum(data.failed),
    });
    const throughput = [
      { name: t("charts.throughput"), color: COLORS[0], values: data.throughput_per_min },
    ];
    const queue = [
      { name: t("charts.pending"), color: COLORS[2], values: data.queue_depth },
      { name: t("charts.running"), color: COLORS[0], values: data.running },
    ];
    const types = Object.keys(data.durations_sec);
    const durations = types.map((type, i) => ({
      name: `${typeName(type)} (${data.duration_summary[type].count})`,
      color: COLORS[i % COLORS.length],
      values: data.durations_sec[type],
    }));
    clear(grid).append(
      card("chart-throughput", t("charts.throughput"), lineChart(data.buckets, throughput)),
      card("chart-queue", t("charts.queue"), lineChart(data.buckets, queue), legend(queue)),
      card(
        "chart-durations",
        t("charts.durations"),
        types.length
          ? [lineChart(data.buckets, durations), legend(durations)]
          : h("p", { class: "muted" }, t("charts.no_durations")),
      ),
    );
    if (data.truncated) grid.append(h("p", { class: "muted small" }, t("charts.truncated")));
  }

  select.addEventListener("change", () => {
    windowValue = select.value;
    sessionStorage.setItem("fredica.charts.window", windowValue);
    load();
  });
  load();
  const timer = setInterval(load, REFRESH_MS);
  return () => {
    alive = false;
    clearInterval(timer);
  };
}
