// Boot: language, header, live connection, client-side routing between the pages.

import { lang, onLangChange, setLang, t, translateDom } from "./i18n.js";
import { connect, onLive, state } from "./live.js";
import { checkRecovery } from "./dialogs.js";
import { renderProcessing } from "./processing.js";
import { renderPipeline } from "./pipeline.js";
import { renderTools } from "./tools.js";
import { renderHistory } from "./history.js";
import "./notifications.js";
import { renderSettings } from "./settings.js";
import { renderCharts } from "./charts.js";
import { renderMaterials } from "./materials.js";
import { renderLibraries } from "./libraries.js";
import "./media.js";
import { clear } from "./dom.js";

const ROUTES = [
  [/^\/(processing)?\/?$/, "processing", () => renderProcessing],
  [/^\/tools\/?$/, "tools", () => renderTools],
  [/^\/pipelines\/([^/]+)\/?$/, "processing", () => renderPipeline],
  [/^\/history\/?$/, "history", () => renderHistory],
  [/^\/settings\/?$/, "settings", () => renderSettings],
  [/^\/charts\/?$/, "charts", () => renderCharts],
  [/^\/materials\/?$/, "materials", () => renderMaterials],
  [/^\/libraries\/?$/, "libraries", () => renderLibraries],
];

let cleanup = null;

function route() {
  const app = document.getElementById("app");
  const path = location.pathname;
  if (cleanup) cleanup();
  cleanup = null;
  clear(app);
  for (const [re, nav, load] of ROUTES) {
    const match = path.match(re);
    if (!match) continue;
    for (const a of document.querySelectorAll("[data-nav]")) {
      a.classList.toggle("active", a.dataset.nav === nav);
    }
    cleanup = load()(app, ...match.slice(1)) || null;
    return;
  }
  navigate("/processing", true);
}

/** Go to `path` without reloading the page. */
export function navigate(path, replace = false) {
  if (replace) history.replaceState(null, "", path);
  else history.pushState(null, "", path);
  route();
}

function showConnection() {
  const el = document.getElementById("conn");
  el.className = `conn conn-${state.connection}`;
  el.dataset.state = state.connection;
  el.textContent = t(
    state.connection === "live"
      ? "conn.live"
      : state.connection === "offline"
        ? "conn.offline"
        : "conn.connecting",
  );
}

function applyLanguage() {
  document.documentElement.lang = lang() === "zh" ? "zh-CN" : "en";
  document.title = t("app.title");
  translateDom(document);
  showConnection();
}

document.addEventListener("click", (event) => {
  const link = event.target.closest("a[data-link]");
  if (link && !event.ctrlKey && !event.metaKey && !event.shiftKey && event.button === 0) {
    event.preventDefault();
    if (link.getAttribute("href") !== location.pathname) navigate(link.getAttribute("href"));
    return;
  }
  const closer = event.target.closest("dialog [data-close]");
  if (closer) closer.closest("dialog").close("");
});

window.addEventListener("popstate", route);

document.getElementById("lang-switch").addEventListener("click", () => {
  setLang(lang() === "zh" ? "en" : "zh");
});

onLangChange(() => {
  applyLanguage();
  route(); // pages build their text when they render
});

onLive(({ type }) => {
  if (type === "connection") showConnection();
  // A snapshot comes after every (re)connect, also when the node restarted after a crash:
  // that is when the recovery question may have opened.
  if (type === "snapshot") {
    showConnection();
    checkRecovery();
  }
});

applyLanguage();
connect();
route();
