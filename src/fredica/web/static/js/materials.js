// 素材 /materials (seed 001 §9.2): every material of the recent pipelines with its title,
// duration, thumbnail when one was made here, and one status badge from all its pipelines.

import { get, withToken } from "./api.js";
import { addStrings, t } from "./i18n.js";
import { onLive } from "./live.js";
import { clear, h, statusBadge } from "./dom.js";

addStrings({
  zh: {
    "nav.materials": "素材",
    "materials.title": "素材",
    "materials.empty": "还没有素材：新建一个流水线即可。",
    "materials.pipelines": "{n} 个流水线",
    "materials.open": "打开最新的流水线",
    "status.none": "无",
  },
  en: {
    "nav.materials": "Materials",
    "materials.title": "Materials",
    "materials.empty": "No materials yet: create a pipeline to add one.",
    "materials.pipelines": "{n} pipeline(s)",
    "materials.open": "Open the newest pipeline",
    "status.none": "none",
  },
});

const REFRESH_MS = 2000; // at most one reload per interval while changes arrive

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "";
  const s = Math.round(seconds);
  const two = (n) => String(n).padStart(2, "0");
  const hms =
    s >= 3600 ? [Math.floor(s / 3600), two(Math.floor(s / 60) % 60)] : [Math.floor(s / 60)];
  return `${hms.join(":")}:${two(s % 60)}`;
}

function card(m) {
  // an <img> cannot send a header: /files/outputs/ takes the token as ?token=
  const img = m.thumbnail_url
    ? h("img", {
        class: "material-thumb",
        alt: "",
        loading: "lazy",
        src: withToken(m.thumbnail_url),
      })
    : null;
  const newest = m.pipelines[0];
  return h(
    "a",
    {
      class: "card material-card",
      href: `/pipelines/${newest.id}`,
      "data-link": true,
      title: t("materials.open"),
      dataset: { material: m.material_id, status: m.status },
    },
    h("div", { class: "material-media" }, h("span", { class: "material-icon" }, "🎞"), img),
    h(
      "div",
      { class: "material-body" },
      h("div", { class: "material-title" }, m.title),
      h(
        "div",
        { class: "material-meta" },
        statusBadge(m.status),
        h("span", { class: "muted small material-duration" }, duration(m.duration_sec)),
        h("span", { class: "muted small" }, t("materials.pipelines", { n: m.pipelines.length })),
      ),
    ),
  );
}

export function renderMaterials(app) {
  const grid = h("div", { class: "materials-grid" });
  app.append(
    h(
      "section",
      { class: "page page-materials" },
      h("div", { class: "page-head" }, h("h1", {}, t("materials.title"))),
      grid,
    ),
  );
  let alive = true;
  let last = 0;
  let timer = null;
  async function load() {
    last = Date.now();
    let data;
    try {
      data = await get("/api/v1/materials");
    } catch (err) {
      clear(grid).append(h("p", { class: "dialog-error" }, err.message));
      return;
    }
    if (!alive) return;
    clear(grid);
    if (!data.materials.length) grid.append(h("p", { class: "muted" }, t("materials.empty")));
    for (const m of data.materials) grid.append(card(m));
  }
  const off = onLive(({ type }) => {
    if (type !== "change" || timer) return;
    timer = setTimeout(
      () => {
        timer = null;
        if (alive) load();
      },
      Math.max(0, REFRESH_MS - (Date.now() - last)),
    );
  });
  load();
  return () => {
    alive = false;
    off();
    if (timer) clearTimeout(timer);
  };
}
