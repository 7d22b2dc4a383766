// 媒体库 /libraries: the watch folders of worker.yaml `libraries:` (docs/libraries.md). Each
// library with its folder, template and watcher; its files with their status, their pipeline
// and their history; "scan now" and "process again".

import { get, post } from "./api.js";
import { addStrings, t } from "./i18n.js";
import { onLive } from "./live.js";
import { clear, formatBytes, formatDateTime, h, shortId, toast } from "./dom.js";

addStrings({
  zh: {
    "nav.libraries": "媒体库",
    "libraries.title": "媒体库（监视文件夹）",
    "libraries.empty": "没有配置媒体库：在 worker.yaml 的 libraries: 中添加一个文件夹。",
    "libraries.folder": "文件夹",
    "libraries.template": "模板",
    "libraries.watcher": "监视节点",
    "libraries.deciding": "确定中…",
    "libraries.last_scan": "上次扫描",
    "libraries.never": "从未",
    "libraries.rescan": "立即扫描",
    "libraries.rescanned": "已扫描 {name}：找到 {found} 个，新处理 {taken} 个，{settling} 个待稳定，{gone} 个已消失",
    "libraries.reprocess": "重新处理",
    "libraries.reprocessed": "已创建流水线 {id}",
    "libraries.path": "文件",
    "libraries.status": "状态",
    "libraries.pipeline": "流水线",
    "libraries.size": "大小",
    "libraries.history": "历史",
    "libraries.no_files": "还没有文件。",
    "libraries.inotify": "inotify 已启用",
    "libraries.polling": "定时扫描",
    "lib.settling": "等待稳定",
    "lib.queued": "已处理",
    "lib.watched_elsewhere": "由其他节点监视",
    "lib.gone": "已消失",
    "lib.error": "错误",
  },
  en: {
    "nav.libraries": "Libraries",
    "libraries.title": "Libraries (watch folders)",
    "libraries.empty": "No library configured: add a folder under libraries: in worker.yaml.",
    "libraries.folder": "Folder",
    "libraries.template": "Template",
    "libraries.watcher": "Watched by",
    "libraries.deciding": "deciding…",
    "libraries.last_scan": "Last scan",
    "libraries.never": "never",
    "libraries.rescan": "Scan now",
    "libraries.rescanned": "Scanned {name}: {found} found, {taken} taken, {settling} settling, {gone} gone",
    "libraries.reprocess": "Process again",
    "libraries.reprocessed": "Pipeline {id} created",
    "libraries.path": "File",
    "libraries.status": "Status",
    "libraries.pipeline": "Pipeline",
    "libraries.size": "Size",
    "libraries.history": "History",
    "libraries.no_files": "No files yet.",
    "libraries.inotify": "inotify on",
    "libraries.polling": "periodic scan",
    "lib.settling": "settling",
    "lib.queued": "processed",
    "lib.watched_elsewhere": "watched by another node",
    "lib.gone": "gone",
    "lib.error": "error",
  },
});

const REFRESH_MS = 2000; // at most one reload per interval while changes arrive
const enc = encodeURIComponent;

function fileBadge(status) {
  return h("span", { class: `badge lib-${status}`, dataset: { status } }, t(`lib.${status}`));
}

function historyText(f) {
  return (f.history || [])
    .map((e) => `${formatDateTime(e.at)} ${e.event}${e.pipeline_id ? " " + shortId(e.pipeline_id) : ""}`)
    .join("\n");
}

function fileRow(lib, f, reload) {
  const pipeline = f.pipeline_id
    ? h("a", { href: `/pipelines/${f.pipeline_id}`, "data-link": true }, shortId(f.pipeline_id))
    : "";
  const again =
    f.id && f.status !== "gone"
      ? h(
          "button",
          {
            class: "btn btn-small",
            type: "button",
            dataset: { action: "reprocess" },
            onclick: async () => {
              try {
                const r = await post(`/api/v1/libraries/${enc(lib.name)}/files/${enc(f.id)}/reprocess`);
                toast(t("libraries.reprocessed", { id: shortId(r.pipeline_id) }));
                reload();
              } catch (err) {
                toast(err.message, "error");
              }
            },
          },
          t("libraries.reprocess"),
        )
      : "";
  return h(
    "tr",
    { dataset: { path: f.path, status: f.status } },
    h("td", { class: "lib-path", title: historyText(f) }, f.path),
    h("td", {}, fileBadge(f.status), f.note ? h("span", { class: "muted small" }, " " + f.note) : ""),
    h("td", {}, pipeline),
    h("td", { class: "muted small" }, formatBytes(f.size)),
    h("td", {}, again),
  );
}

function libraryCard(lib, files, reload) {
  const head = h(
    "tr",
    {},
    ...["libraries.path", "libraries.status", "libraries.pipeline", "libraries.size", ""].map((k) =>
      h("th", {}, k ? t(k) : ""),
    ),
  );
  const body = h("tbody", {});
  for (const f of files) body.append(fileRow(lib, f, reload));
  const meta = [
    [t("libraries.folder"), lib.folder + (lib.error ? ` (${lib.error})` : "")],
    [t("libraries.template"), lib.template],
    [t("libraries.watcher"), lib.watcher || t("libraries.deciding")],
    [t("libraries.last_scan"), lib.last_scan_at ? formatDateTime(lib.last_scan_at) : t("libraries.never")],
  ];
  return h(
    "div",
    { class: "card library-card", dataset: { library: lib.name } },
    h(
      "div",
      { class: "page-head" },
      h("h2", {}, lib.name),
      h("span", { class: "muted small" }, t(lib.inotify ? "libraries.inotify" : "libraries.polling")),
      h(
        "button",
        {
          class: "btn",
          type: "button",
          dataset: { action: "rescan" },
          onclick: async () => {
            try {
              const r = await post(`/api/v1/libraries/${enc(lib.name)}/rescan`);
              if (r.error) toast(r.error, "error");
              else toast(t("libraries.rescanned", { name: lib.name, ...r }));
              reload();
            } catch (err) {
              toast(err.message, "error");
            }
          },
        },
        t("libraries.rescan"),
      ),
    ),
    h("dl", { class: "library-meta" }, ...meta.flatMap(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
    files.length
      ? h("div", { class: "table-wrap" }, h("table", { class: "table library-files" }, h("thead", {}, head), body))
      : h("p", { class: "muted" }, t("libraries.no_files")),
  );
}

export function renderLibraries(app) {
  const list = h("div", { class: "libraries" });
  app.append(
    h(
      "section",
      { class: "page page-libraries" },
      h("div", { class: "page-head" }, h("h1", {}, t("libraries.title"))),
      list,
    ),
  );
  let alive = true;
  let last = 0;
  let timer = null;
  async function load() {
    last = Date.now();
    let cards;
    try {
      const data = await get("/api/v1/libraries");
      cards = await Promise.all(
        data.libraries.map(async (lib) => {
          const files = await get(`/api/v1/libraries/${enc(lib.name)}/files`);
          return libraryCard(lib, files.files, load);
        }),
      );
    } catch (err) {
      clear(list).append(h("p", { class: "dialog-error" }, err.message));
      return;
    }
    if (!alive) return;
    clear(list);
    if (!cards.length) list.append(h("p", { class: "muted" }, t("libraries.empty")));
    for (const card of cards) list.append(card);
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
