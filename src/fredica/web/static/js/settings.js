// 设置 /settings: the common worker.yaml keys (GET/PUT /api/v1/settings). The node validates
// a change like `fredica config check` and writes it back keeping the file's comments; the
// page sends only the fields that changed and says which changes wait for a restart.

import { ApiError, api, get } from "./api.js";
import { addStrings, t } from "./i18n.js";
import { clear, h, toast } from "./dom.js";

addStrings({
  zh: {
    "nav.settings": "设置",
    "settings.title": "设置",
    "settings.file": "配置文件：{path}",
    "settings.read_only": "本节点没有 worker.yaml，只能查看。",
    "settings.save": "保存",
    "settings.reset": "还原",
    "settings.saved": "已保存 {n} 项",
    "settings.nothing": "没有修改",
    "settings.restart": "以下修改在节点重启后生效：{keys}",
    "settings.pending": "待重启",
    "settings.restart_hint": "修改后需重启节点",
    "settings.live_hint": "立即生效",
    "settings.secret_set": "已设置（留空或不改则保持不变）",
    "settings.secret_empty": "未设置",
    "settings.list_hint": "每行一项",
    "settings.null": "不限",
    "settings.forbidden": "需要带 admin 权限的令牌才能查看设置。",
    "settings.group.node": "节点",
    "settings.group.cluster": "集群",
    "settings.group.platforms": "下载平台",
    "settings.group.slots": "能力与并发槽位",
    "settings.group.cloud": "云端策略",
    "settings.group.tokens": "密钥与令牌",
    "settings.group.access": "访问控制",
    "settings.group.storage": "存储与上传",
    "settings.leaf.enabled": "启用",
    "settings.leaf.max_concurrent": "并发槽位",
    "settings.leaf.cloud_allowed": "允许云端",
    "settings.leaf.max_cost_per_task_usd": "每任务成本上限 (USD)",
    "settings.key.node.max_workers": "并行任务数",
    "settings.key.node.network_region": "网络区域",
    "settings.key.node.bandwidth_mbps": "下行带宽 (Mbps)",
    "settings.key.node.is_storage_node": "存储节点 (NAS)",
    "settings.key.cluster.seeds": "种子节点 (host:port)",
    "settings.key.cluster.cluster_secret": "集群密钥",
    "settings.key.capabilities.download.max_concurrent": "同时下载数",
    "settings.key.capabilities.download.disk_min_free_gb": "保留磁盘空间 (GiB)",
    "settings.key.capabilities.download.youtube.proxy": "YouTube 代理",
    "settings.key.capabilities.download.bilibili.sessdata": "B 站 SESSDATA",
    "settings.key.capabilities.transcribe.api_key": "云端转写 API Key",
    "settings.key.capabilities.speaker_diarize.hf_token": "HuggingFace 令牌",
    "settings.key.auth.mode": "认证模式",
    "settings.key.media_folders": "媒体文件夹（只读）",
    "settings.key.storage.max_upload_mb": "上传大小上限 (MB)",
    "settings.key.storage.results_retain_days": "结果保留天数",
  },
  en: {
    "nav.settings": "Settings",
    "settings.title": "Settings",
    "settings.file": "File: {path}",
    "settings.read_only": "This node has no worker.yaml: the settings can only be viewed.",
    "settings.save": "Save",
    "settings.reset": "Reset",
    "settings.saved": "Saved {n} change(s)",
    "settings.nothing": "Nothing changed",
    "settings.restart": "These changes take effect after the node restarts: {keys}",
    "settings.pending": "restart pending",
    "settings.restart_hint": "needs a restart",
    "settings.live_hint": "applies at once",
    "settings.secret_set": "set (leave as is to keep it)",
    "settings.secret_empty": "not set",
    "settings.list_hint": "one per line",
    "settings.null": "no limit",
    "settings.forbidden": "The settings need a token with the admin permission.",
    "settings.group.node": "Node",
    "settings.group.cluster": "Cluster",
    "settings.group.platforms": "Download platforms",
    "settings.group.slots": "Capabilities and slots",
    "settings.group.cloud": "Cloud policy",
    "settings.group.tokens": "Keys and tokens",
    "settings.group.access": "Access",
    "settings.group.storage": "Storage and uploads",
    "settings.leaf.enabled": "enabled",
    "settings.leaf.max_concurrent": "slots",
    "settings.leaf.cloud_allowed": "cloud allowed",
    "settings.leaf.max_cost_per_task_usd": "max cost per task (USD)",
    "settings.key.node.max_workers": "Parallel tasks",
    "settings.key.node.network_region": "Network region",
    "settings.key.node.bandwidth_mbps": "Downstream bandwidth (Mbps)",
    "settings.key.node.is_storage_node": "Storage node (NAS)",
    "settings.key.cluster.seeds": "Seed peers (host:port)",
    "settings.key.cluster.cluster_secret": "Cluster secret",
    "settings.key.capabilities.download.max_concurrent": "Downloads at once",
    "settings.key.capabilities.download.disk_min_free_gb": "Disk space kept free (GiB)",
    "settings.key.capabilities.download.youtube.proxy": "YouTube proxy",
    "settings.key.capabilities.download.bilibili.sessdata": "Bilibili SESSDATA",
    "settings.key.capabilities.transcribe.api_key": "Cloud transcription API key",
    "settings.key.capabilities.speaker_diarize.hf_token": "HuggingFace token",
    "settings.key.auth.mode": "Authentication",
    "settings.key.media_folders": "Media folders (read-only)",
    "settings.key.storage.max_upload_mb": "Upload size limit (MB)",
    "settings.key.storage.results_retain_days": "Keep results (days)",
  },
});

const GROUPS = ["node", "platforms", "slots", "cloud", "tokens", "cluster", "access", "storage"];

/** A readable label: a translation of the key, else "<section> <leaf>" for the generated ones
 * (capabilities.ocr.enabled -> "ocr enabled"). */
function label(key) {
  const own = t(`settings.key.${key}`, {}, "");
  if (own) return own;
  const parts = key.split(".");
  const leaf = parts[parts.length - 1];
  const section = parts[parts.length - 2] || "";
  return `${section} · ${t(`settings.leaf.${leaf}`, {}, leaf)}`;
}

function inputFor(row) {
  const name = row.key;
  const value = row.value;
  switch (row.kind) {
    case "bool":
      return h("input", { type: "checkbox", name, checked: value === true });
    case "choice":
      return h(
        "select",
        { name },
        row.choices.map((c) => h("option", { value: c, selected: c === value }, c)),
      );
    case "int":
    case "float":
      return h("input", {
        type: "number",
        name,
        step: row.kind === "int" ? 1 : "any",
        value: value ?? "",
        placeholder: row.nullable ? t("settings.null") : undefined,
      });
    case "list":
      return h(
        "textarea",
        { name, rows: 2, spellcheck: "false", class: "mono", placeholder: t("settings.list_hint") },
        (value || []).join("\n"),
      );
    case "secret":
      return h("input", {
        type: "password",
        name,
        autocomplete: "off",
        value: value || "",
        placeholder: value ? t("settings.secret_set") : t("settings.secret_empty"),
      });
    default:
      return h("input", { type: "text", name, autocomplete: "off", value: value ?? "" });
  }
}

/** The field's value as the API wants it (numbers as numbers, lists as arrays). */
function readInput(row, el) {
  if (row.kind === "bool") return el.checked;
  if (row.kind === "list") {
    return el.value
      .split("\n")
      .map((s) => s.trim())
      .filter(Boolean);
  }
  if (row.kind === "int" || row.kind === "float") {
    if (el.value.trim() === "") return row.nullable ? null : el.value;
    const n = Number(el.value);
    return Number.isFinite(n) ? n : el.value; // the node names a value that is not a number
  }
  return el.value;
}

const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);

export function renderSettings(app) {
  const body = h(
    "div",
    { class: "settings-groups" },
    h("p", { class: "muted" }, t("common.loading")),
  );
  const fileLine = h("p", { class: "muted small settings-file" });
  const notice = h("p", { class: "settings-restart", role: "status", hidden: true });
  const error = h("p", { class: "dialog-error", role: "alert", hidden: true });
  const save = h(
    "button",
    { type: "submit", class: "btn btn-primary", id: "settings-save" },
    t("settings.save"),
  );
  const reset = h("button", { type: "button", class: "btn" }, t("settings.reset"));
  const form = h(
    "form",
    { class: "settings-form", novalidate: true },
    body,
    error,
    notice,
    h("div", { class: "settings-actions" }, reset, save),
  );
  app.append(
    h(
      "section",
      { class: "page page-settings" },
      h("div", { class: "page-head" }, h("h1", {}, t("settings.title"))),
      fileLine,
      form,
    ),
  );

  let rows = [];
  let writable = false;
  let alive = true;

  function showError(message) {
    error.textContent = message || "";
    error.hidden = !message;
  }

  function draw(view) {
    rows = view.settings;
    fileLine.textContent = view.path ? t("settings.file", { path: view.path }) : "";
    writable = view.writable;
    save.disabled = !writable;
    if (!view.writable) showError(t("settings.read_only"));
    clear(body);
    for (const group of GROUPS) {
      const members = rows.filter((r) => r.group === group);
      if (!members.length) continue;
      const fields = members.map((row) => {
        const input = inputFor(row);
        const hint = row.pending_restart
          ? h("span", { class: "badge st-paused" }, t("settings.pending"))
          : h(
              "span",
              { class: "muted small" },
              row.restart ? t("settings.restart_hint") : t("settings.live_hint"),
            );
        return h(
          "label",
          {
            class: `setting setting-${row.kind}`,
            dataset: { key: row.key, pending: row.pending_restart ? "1" : "0" },
          },
          h("span", { class: "setting-label" }, label(row.key)),
          input,
          h("span", { class: "setting-meta" }, h("code", { class: "small" }, row.key), " ", hint),
        );
      });
      body.append(
        h(
          "fieldset",
          { class: "card settings-group", dataset: { group } },
          h("legend", {}, t(`settings.group.${group}`)),
          h("div", { class: "settings-fields" }, fields),
        ),
      );
    }
  }

  async function load() {
    try {
      const view = await get("/api/v1/settings");
      if (alive) draw(view);
    } catch (err) {
      clear(body);
      showError(
        err instanceof ApiError && err.status === 403 ? t("settings.forbidden") : err.message,
      );
    }
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    showError("");
    const changes = {};
    for (const row of rows) {
      const el = form.elements[row.key];
      if (!el) continue;
      const value = readInput(row, el);
      if (!same(value, row.value)) changes[row.key] = value;
    }
    if (!Object.keys(changes).length) {
      toast(t("settings.nothing"));
      return;
    }
    save.disabled = true;
    try {
      const answer = await api("PUT", "/api/v1/settings", { changes });
      draw(answer);
      toast(t("settings.saved", { n: answer.changed.length }));
      notice.hidden = !answer.restart_required.length;
      notice.textContent = t("settings.restart", { keys: answer.restart_required.join(", ") });
      notice.dataset.keys = answer.restart_required.join(",");
    } catch (err) {
      showError(err.message);
    } finally {
      save.disabled = !writable;
    }
  });
  reset.addEventListener("click", () => {
    showError("");
    load();
  });

  load();
  return () => {
    alive = false;
  };
}
