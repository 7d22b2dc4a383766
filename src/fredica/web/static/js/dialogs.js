// The new-pipeline dialog with its quality trade-off confirmation (seed 001 §2.7.2), and the
// crash-recovery dialog (seed 001 §7.5).

import { get, post } from "./api.js";
import { t, translateDom, typeName } from "./i18n.js";
import { clear, h, toast } from "./dom.js";

const CUSTOM_EXAMPLE = `{"tasks": [
  {"ref": "probe", "type": "NETWORK_TEST", "payload": {"urls": ["https://example.org/"]}},
  {"ref": "again", "type": "NETWORK_TEST", "depends_on": ["probe"]}
]}`;

let webConfig = null;

/** GET /api/v1/web/config, once per page load. */
export async function loadWebConfig() {
  if (!webConfig) webConfig = await get("/api/v1/web/config");
  return webConfig;
}

function parseJsonField(form, name, label, expectArray = false) {
  const text = form.elements[name].value.trim();
  if (!text) return undefined;
  let value;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new Error(t("dialog.new.bad_json", { field: label, error: err.message }));
  }
  if (expectArray && Array.isArray(value)) return value;
  if (value === null || typeof value !== "object" || Array.isArray(value)) {
    throw new Error(t("dialog.new.not_object", { field: label }));
  }
  return value;
}

/** The POST /api/v1/pipelines body from the form (throws on malformed JSON fields). */
function buildRequest(form) {
  const body = {
    template: form.elements.template.value,
    language: form.elements.language.value,
    cloud_preference: form.elements.cloud_preference.value,
    storage_preference: form.elements.storage_preference.value,
  };
  const source = form.elements.source.value.trim();
  if (source) body.source = source;
  const material = form.elements.material_id.value.trim();
  if (material) body.material_id = material;
  if (form.elements.quality_mode.value) body.quality_mode = form.elements.quality_mode.value;
  const overrides = parseJsonField(form, "overrides", t("dialog.new.overrides"));
  if (overrides) body.overrides = overrides;
  const params = parseJsonField(form, "params", t("dialog.new.params"));
  if (params) body.params = params;
  if (body.template === "custom") {
    // Accept either {"tasks": [...]} (the CLI's file format) or the bare list.
    const tasks = parseJsonField(form, "tasks", t("dialog.new.tasks"), true);
    if (tasks !== undefined) body.tasks = Array.isArray(tasks) ? tasks : tasks.tasks;
  }
  return body;
}

/** Ask whether lowering these quality-default task types is acceptable; true to go on. */
function confirmQuality(items) {
  const dialog = document.getElementById("quality-dialog");
  translateDom(dialog);
  const list = clear(dialog.querySelector(".quality-list"));
  for (const item of items) {
    list.append(
      h(
        "li",
        { dataset: { taskType: item.task_type } },
        h("strong", {}, item.task_type),
        " ",
        t("qconfirm.item", { name: typeName(item.task_type), mode: item.default }),
      ),
    );
  }
  const accept = dialog.querySelector("input[name=accept]");
  const confirm = dialog.querySelector("button[value=confirm]");
  accept.checked = false;
  confirm.disabled = true;
  accept.onchange = () => {
    confirm.disabled = !accept.checked;
  };
  return new Promise((resolve) => {
    dialog.addEventListener(
      "close",
      () => resolve(dialog.returnValue === "confirm" && accept.checked),
      { once: true },
    );
    dialog.returnValue = "";
    dialog.showModal();
  });
}

/** Open the new-pipeline dialog; `onCreated(response)` runs after a successful create. */
export async function openNewPipeline(onCreated) {
  const dialog = document.getElementById("new-pipeline-dialog");
  const form = dialog.querySelector("form");
  const error = dialog.querySelector(".dialog-error");
  const showError = (message) => {
    error.textContent = message || "";
    error.hidden = !message;
  };
  translateDom(dialog);
  showError("");
  const config = await loadWebConfig().catch((err) => {
    toast(err.message, "error");
    return null;
  });
  if (!config) return;
  const select = form.elements.template;
  const previous = select.value;
  clear(select);
  for (const name of Object.keys(config.templates)) {
    select.append(h("option", { value: name }, name));
  }
  select.value = previous && config.templates[previous] ? previous : "custom";
  if (!form.elements.tasks.value.trim()) form.elements.tasks.value = CUSTOM_EXAMPLE;
  const syncTemplate = () => {
    const name = select.value;
    // the node describes its templates in English; known ones have a translation here
    const described = config.templates[name]?.description || "";
    dialog.querySelector(".template-desc").textContent = t(`template.${name}`, {}, described);
    dialog.querySelector(".field-tasks").hidden = name !== "custom";
  };
  select.onchange = syncTemplate;
  syncTemplate();

  form.onsubmit = async (event) => {
    event.preventDefault();
    showError("");
    let body;
    try {
      body = buildRequest(form);
    } catch (err) {
      showError(err.message);
      return;
    }
    const submit = form.querySelector("button[type=submit]");
    submit.disabled = true;
    try {
      if (body.quality_mode || body.overrides) {
        const check = await post("/api/v1/web/quality-check", body);
        if (check.needs_confirmation.length) {
          if (!(await confirmQuality(check.needs_confirmation))) return;
          body.quality_tradeoff_acknowledged = true;
        }
      }
      const created = await post("/api/v1/pipelines", body);
      dialog.close("created");
      toast(t("dialog.new.created", { id: created.pipeline_id.slice(0, 8) }));
      if (onCreated) onCreated(created);
    } catch (err) {
      showError(err.message);
    } finally {
      submit.disabled = false;
    }
  };
  dialog.showModal();
}

// --- crash recovery ------------------------------------------------------------------------

let recoveryShown = false;

function groupText(byType) {
  const parts = Object.entries(byType || {}).map(([type, n]) => `${typeName(type)} ${n}`);
  return parts.length ? t("recovery.groups", { list: parts.join(t("list.sep")) }) : "";
}

/** Show the recovery dialog when the node crashed and nobody answered yet (this run). */
export async function checkRecovery() {
  if (recoveryShown) return;
  let info;
  try {
    info = await get("/api/v1/recovery");
  } catch {
    return;
  }
  if (!info.needed) return;
  const dialog = document.getElementById("recovery-dialog");
  translateDom(dialog);
  const list = clear(dialog.querySelector(".recovery-list"));
  const line = (key, n, byType) =>
    h(
      "li",
      { dataset: { count: key } },
      t(`recovery.${key}`, { n }),
      h("span", { class: "muted" }, groupText(byType)),
    );
  list.append(line("running_elsewhere", info.running_elsewhere, info.by_type.running_elsewhere));
  if (info.running_here) {
    list.append(line("running_here", info.running_here, info.by_type.running_here));
  }
  list.append(line("pending", info.pending, info.by_type.pending));
  const error = dialog.querySelector(".dialog-error");
  error.hidden = true;
  for (const button of dialog.querySelectorAll("[data-recovery]")) {
    button.disabled = false;
    button.onclick = async () => {
      for (const b of dialog.querySelectorAll("[data-recovery]")) b.disabled = true;
      try {
        const answer = await post("/api/v1/recovery", { action: button.dataset.recovery });
        dialog.close("answered");
        const n =
          answer.action === "cancel_all" ? answer.cancelled_pipelines : answer.cancelled_tasks;
        toast(t(`recovery.done.${answer.action}`, { n }));
      } catch (err) {
        error.textContent = err.message;
        error.hidden = false;
        for (const b of dialog.querySelectorAll("[data-recovery]")) b.disabled = false;
      }
    };
  }
  // The question must be answered: Escape does not dismiss it.
  dialog.oncancel = (event) => event.preventDefault();
  dialog.addEventListener("close", () => (recoveryShown = false), { once: true });
  recoveryShown = true;
  dialog.showModal();
}
