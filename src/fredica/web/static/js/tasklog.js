// A task's log in the task details: what each attempt printed (its commands and their stderr),
// followed live while the task runs. Reads only what was added since the last read
// (`?offset=` the previous answer's X-Log-End).

import { getText, withToken } from "./api.js";
import { t } from "./i18n.js";
import { clear, h } from "./dom.js";

const FOLLOW_MS = 1000; // how often a running task's log is read again

/** The log panel of task `taskId`; call `.update(task)` whenever the task changes. */
export function logPanel(taskId) {
  const select = h("select", { class: "log-attempt", "aria-label": t("task.log") });
  const download = h("a", { class: "btn btn-sm log-download", hidden: true }, t("task.log_download"));
  const view = h("pre", { class: "log-view", tabindex: "0" });
  const panel = h(
    "section",
    { class: "task-log", dataset: { taskId } },
    h("div", { class: "log-head" }, h("h3", {}, t("task.log")), select, download),
    view,
  );
  const state = { chosen: null, shown: null, end: 0, reading: null, again: false, timer: null };

  select.addEventListener("change", () => {
    state.chosen = Number(select.value);
    reset();
    read();
  });

  function reset() {
    state.shown = null;
    state.end = 0;
    clear(view);
  }

  function showAttempts(attempts, current) {
    const values = attempts.map(String);
    const have = [...select.options].map((o) => o.value);
    if (values.join() !== have.join()) {
      clear(select).append(
        ...attempts.map((n) => h("option", { value: String(n) }, t("task.log_attempt", { n }))),
      );
    }
    select.value = String(current);
    select.hidden = attempts.length < 2;
    download.hidden = false;
    download.href = withToken(`/api/v1/tasks/${taskId}/log?attempt=${current}`);
    download.setAttribute("download", `${taskId}-attempt-${current}.log`);
  }

  async function readOnce() {
    const params = new URLSearchParams();
    const attempt = state.chosen ?? state.shown;
    if (attempt) params.set("attempt", attempt);
    if (state.shown !== null && attempt === state.shown) params.set("offset", state.end);
    let answer;
    try {
      answer = await getText(`/api/v1/tasks/${taskId}/log?${params}`);
    } catch (err) {
      if (err.status !== 404) throw err;
      reset();
      view.append(h("span", { class: "muted" }, t("task.log_none")));
      return;
    }
    const current = Number(answer.headers.get("X-Log-Attempt"));
    const attempts = (answer.headers.get("X-Log-Attempts") || "").split(",").filter(Boolean);
    const latest = Number(attempts[attempts.length - 1] || current);
    if (state.chosen === null && state.shown !== null && latest > state.shown) {
      // a new attempt began: follow it from its start
      reset();
      return readOnce();
    }
    const start = Number(answer.headers.get("X-Log-Start"));
    const atBottom = view.scrollTop + view.clientHeight >= view.scrollHeight - 4;
    if (state.shown !== current || start !== state.end || !view.firstChild) {
      // a first read, another attempt, or text that was dropped meanwhile: replace the view
      clear(view);
      if (state.shown !== current || start !== state.end) view.scrollTop = 0;
    }
    if (view.firstChild?.classList?.contains("muted")) clear(view);
    if (answer.text) view.append(document.createTextNode(answer.text));
    if (!view.firstChild) view.append(h("span", { class: "muted" }, t("task.log_empty")));
    state.shown = current;
    state.end = Number(answer.headers.get("X-Log-End"));
    showAttempts(attempts.map(Number), current);
    if (atBottom) view.scrollTop = view.scrollHeight;
  }

  async function read() {
    if (state.reading) {
      state.again = true;
      return state.reading;
    }
    state.reading = (async () => {
      try {
        do {
          state.again = false;
          await readOnce();
        } while (state.again && panel.isConnected);
      } catch {
        // the next change or tick reads again; the page shows other errors already
      } finally {
        state.reading = null;
      }
    })();
    return state.reading;
  }

  function update(task) {
    clearInterval(state.timer);
    state.timer = null;
    if (task.status === "running" || task.status === "claimed") {
      state.timer = setInterval(() => {
        if (!panel.isConnected) {
          clearInterval(state.timer);
          return;
        }
        read();
      }, FOLLOW_MS);
    }
    read();
  }

  function stop() {
    clearInterval(state.timer);
  }

  return { element: panel, update, stop };
}
