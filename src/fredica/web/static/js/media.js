// "Upload" and "Pick" beside the source field of the new-pipeline dialog: a file from the
// browser is streamed to POST /api/v1/uploads (with a progress bar), or one is picked from the
// node's read-only media folders (GET /api/v1/media-folders/...). Either fills in the source.

import { get, getToken } from "./api.js";
import { addStrings, onLangChange, t } from "./i18n.js";
import { clear, formatBytes, h } from "./dom.js";

addStrings({
  zh: {
    "media.upload": "上传文件…",
    "media.pick": "从媒体文件夹选择…",
    "media.uploading": "上传中 {name}：{pct}%",
    "media.uploaded": "已上传 {name}（{size}）",
    "media.upload_failed": "上传失败：{error}",
    "media.pick_title": "选择媒体文件",
    "media.no_folders":
      "本节点没有配置媒体文件夹（worker.yaml 的 media_folders，可在设置页添加）。",
    "media.up": "上一级",
    "media.empty": "此文件夹为空",
    "media.close": "关闭",
  },
  en: {
    "media.upload": "Upload a file…",
    "media.pick": "Pick from media folders…",
    "media.uploading": "Uploading {name}: {pct}%",
    "media.uploaded": "Uploaded {name} ({size})",
    "media.upload_failed": "Upload failed: {error}",
    "media.pick_title": "Pick a media file",
    "media.no_folders":
      "This node has no media folders (media_folders in worker.yaml; add them on the settings page).",
    "media.up": "Up",
    "media.empty": "This folder is empty",
    "media.close": "Close",
  },
});

/** Send `file` as the body of POST /api/v1/uploads; resolves to the node's answer. XHR rather
 * than fetch: it reports upload progress. */
function upload(file, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", `/api/v1/uploads?name=${encodeURIComponent(file.name)}`);
    xhr.setRequestHeader("Content-Type", "application/octet-stream");
    const token = getToken();
    if (token) xhr.setRequestHeader("Authorization", `Bearer ${token}`);
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable) onProgress(Math.floor((100 * e.loaded) / e.total));
    };
    xhr.onload = () => {
      let data = null;
      try {
        data = JSON.parse(xhr.responseText);
      } catch {
        data = { error: xhr.responseText || `HTTP ${xhr.status}` };
      }
      if (xhr.status >= 200 && xhr.status < 300) resolve(data);
      else reject(new Error(data.error || data.detail || `HTTP ${xhr.status}`));
    };
    xhr.onerror = () => reject(new Error(t("conn.offline")));
    xhr.send(file);
  });
}

function pickerDialog() {
  let dialog = document.getElementById("pick-dialog");
  if (dialog) return dialog;
  dialog = h(
    "dialog",
    { id: "pick-dialog", class: "dialog dialog-wide" },
    h("h2", {}),
    h("div", { class: "pick-path mono small muted" }),
    h("ul", { class: "pick-list" }),
    h(
      "div",
      { class: "dialog-actions" },
      h("button", { type: "button", class: "btn", "data-close": true }),
    ),
  );
  document.body.append(dialog);
  return dialog;
}

/** Browse the media folders; resolves to the chosen file's source path (null: closed). */
function pick() {
  const dialog = pickerDialog();
  dialog.querySelector("h2").textContent = t("media.pick_title");
  dialog.querySelector("[data-close]").textContent = t("media.close");
  const list = dialog.querySelector(".pick-list");
  const where = dialog.querySelector(".pick-path");
  return new Promise((resolve) => {
    let chosen = null;
    const row = (cls, icon, text, extra, onclick) =>
      h(
        "li",
        {},
        h(
          "button",
          { type: "button", class: `pick-item ${cls}`, onclick },
          h("span", { class: "pick-icon" }, icon),
          h("span", { class: "pick-name" }, text),
          extra ? h("span", { class: "muted small" }, extra) : null,
        ),
      );
    const show = async (url, label) => {
      clear(list);
      where.textContent = label || "";
      let data;
      try {
        data = await get(url);
      } catch (err) {
        list.append(h("li", { class: "dialog-error" }, err.message));
        return;
      }
      if (data.folders) {
        if (!data.folders.length) list.append(h("li", { class: "muted" }, t("media.no_folders")));
        for (const f of data.folders) {
          list.append(
            row("pick-dir", "🗀", f.path, null, () => show(`/api/v1/media-folders/${f.id}`, f.path)),
          );
        }
        return;
      }
      const base = `/api/v1/media-folders/${data.root}`;
      const up = data.path.includes("/") ? data.path.slice(0, data.path.lastIndexOf("/")) : "";
      list.append(
        row("pick-up", "↑", t("media.up"), null, () =>
          data.path
            ? show(up ? `${base}/${encodePath(up)}` : base, `${data.root_path}/${up}`)
            : show("/api/v1/media-folders"),
        ),
      );
      if (!data.entries.length) list.append(h("li", { class: "muted" }, t("media.empty")));
      for (const e of data.entries) {
        if (e.kind === "dir") {
          list.append(
            row("pick-dir", "🗀", e.name, null, () =>
              show(`${base}/${encodePath(e.path)}`, `${data.root_path}/${e.path}`),
            ),
          );
        } else {
          list.append(
            row("pick-file", "🎞", e.name, formatBytes(e.size), () => {
              chosen = e.source;
              dialog.close("picked");
            }),
          );
        }
      }
    };
    dialog.addEventListener("close", () => resolve(chosen), { once: true });
    show("/api/v1/media-folders");
    dialog.showModal();
  });
}

const encodePath = (p) => p.split("/").map(encodeURIComponent).join("/");

/** Put the Upload and Pick buttons under the source field of the new-pipeline dialog. */
function enhance() {
  const dialog = document.getElementById("new-pipeline-dialog");
  const field = dialog?.querySelector(".field-source");
  if (!field || dialog.querySelector(".source-tools")) return;
  const source = field.querySelector("input[name=source]");
  const file = h("input", { type: "file", name: "upload_file", hidden: true });
  const uploadButton = h("button", { type: "button", class: "btn btn-sm", id: "source-upload" });
  const pickButton = h("button", { type: "button", class: "btn btn-sm", id: "source-pick" });
  const status = h("span", { class: "upload-status muted small", role: "status" });
  const bar = h("progress", { class: "upload-progress", max: 100, value: 0, hidden: true });
  const submit = dialog.querySelector("button[type=submit]");
  const label = () => {
    uploadButton.textContent = t("media.upload");
    pickButton.textContent = t("media.pick");
  };
  label();
  onLangChange(label);
  uploadButton.addEventListener("click", () => file.click());
  file.addEventListener("change", async () => {
    const chosen = file.files[0];
    if (!chosen) return;
    status.className = "upload-status muted small";
    bar.hidden = false;
    submit.disabled = true;
    const progress = (pct) => {
      bar.value = pct;
      status.textContent = t("media.uploading", { name: chosen.name, pct });
    };
    progress(0);
    try {
      const answer = await upload(chosen, progress);
      source.value = answer.path;
      status.textContent = t("media.uploaded", {
        name: answer.name,
        size: formatBytes(answer.size),
      });
      status.dataset.state = "done";
    } catch (err) {
      status.className = "upload-status dialog-error small";
      status.textContent = t("media.upload_failed", { error: err.message });
      status.dataset.state = "failed";
    } finally {
      bar.hidden = true;
      submit.disabled = false;
      file.value = "";
    }
  });
  pickButton.addEventListener("click", async () => {
    const chosen = await pick();
    if (chosen) {
      source.value = chosen;
      status.className = "upload-status muted small";
      status.textContent = "";
    }
  });
  field.after(
    h("div", { class: "span-2 source-tools" }, uploadButton, pickButton, file, bar, status),
  );
}

enhance();
