// The player of a pipeline's result view: an HTML5 <video>/<audio> of what the pipeline made
// (a video with burned subtitles, the dubbed or spoken audio) or of its source, with the
// subtitles as <track>s, and the cues of the original and the translation side by side.
// Clicking a cue (or a transcript line) seeks the player there; the cue being played is
// highlighted. What can be played comes from GET /api/v1/pipelines/{id}/player.

import { get, withToken } from "./api.js";
import { t } from "./i18n.js";
import { h } from "./dom.js";
import { clock } from "./results.js";

// The task types whose completed results the player offers (web/player.py MEDIA and TRACKS).
const PLAYER_TYPES = new Set([
  "BURN_SUBTITLE",
  "GENERATE_TTS",
  "TRANSCODE",
  "ENHANCE_AUDIO",
  "DOWNLOAD_VIDEO",
  "EXTRACT_AUDIO",
  "MERGE_TRANSCRIPTION",
  "EXTRACT_SUBTITLE",
  "SYNC_SUBTITLE",
  "FORMAT_SUBTITLE",
  "TRANSLATE_TEXT",
]);

function playerTasks(tasks) {
  return tasks.filter((task) => task.status === "completed" && PLAYER_TYPES.has(task.type));
}

/** Changes when what the player shows may have changed (for the result view's refresh key). */
export function playerKey(tasks) {
  return playerTasks(tasks)
    .map((task) => `${task.id}:${task.change_seq}`)
    .join(",");
}

/**
 * Rows of the side-by-side view: each original cue with the translated cues that overlap it
 * most (a translation keeps the cue times, so usually exactly one); translated cues that
 * overlap no original cue get a row of their own.
 */
export function pairCues(original, translation) {
  const rows = original.map((cue) => ({
    start: cue.start,
    end: cue.end,
    original: cue.text,
    translation: [],
  }));
  for (const cue of translation) {
    let best = null;
    let bestOverlap = 0;
    for (const row of rows) {
      const overlap = Math.min(row.end, cue.end) - Math.max(row.start, cue.start);
      if (overlap > bestOverlap) {
        best = row;
        bestOverlap = overlap;
      }
    }
    if (best) best.translation.push(cue.text);
    else rows.push({ start: cue.start, end: cue.end, original: "", translation: [cue.text] });
  }
  rows.sort((a, b) => a.start - b.start);
  return rows.map((row) => ({ ...row, translation: row.translation.join("\n") }));
}

function trackLabel(track) {
  const role = t(`player.${track.role}`);
  return track.language ? `${role} (${track.language})` : role;
}

function mediaLabel(item) {
  return `${t(`player.role.${item.role}`, {}, item.role)} · ${item.name}`;
}

/** Elements whose data-start is a time: clicking one seeks the current media there. */
function seekOnClick(container, currentMedia, selector) {
  container.addEventListener("click", (event) => {
    const target = event.target.closest(selector);
    if (!target || !container.contains(target)) return;
    const start = Number(target.dataset.start);
    if (!Number.isFinite(start)) return;
    const media = currentMedia();
    media.currentTime = start;
    media.play().catch(() => {}); // a browser may refuse to play; the seek stands
  });
}

/** Mark the element whose [data-start, data-end) holds the current time. */
function followTime(container, media, selector) {
  let current = null;
  media.addEventListener("timeupdate", () => {
    const now = media.currentTime;
    const active = [...container.querySelectorAll(selector)].find(
      (el) => Number(el.dataset.start) <= now && now < Number(el.dataset.end),
    );
    if (active === current) return;
    current?.classList.remove("cue-active");
    current?.removeAttribute("aria-current");
    current = active || null;
    current?.classList.add("cue-active");
    current?.setAttribute("aria-current", "true");
  });
}

function cueTable(original, translation) {
  const rows = translation
    ? pairCues(original.cues, translation.cues)
    : original.cues.map((cue) => ({ ...cue, original: cue.text }));
  const head = h(
    "div",
    { class: "cue-row cue-head" + (translation ? "" : " cue-single") },
    h("span", {}, ""),
    h("span", { class: "cue-col-original" }, trackLabel(original)),
    translation ? h("span", { class: "cue-col-translation" }, trackLabel(translation)) : null,
  );
  const list = h(
    "ol",
    { class: "cue-table", id: "cue-table", "aria-label": t("player.cues") },
    ...rows.map((row) =>
      h(
        "li",
        {
          class: "cue-row" + (translation ? "" : " cue-single"),
          tabindex: "0",
          dataset: { start: String(row.start), end: String(row.end) },
          title: t("player.seek_hint"),
        },
        h("time", { class: "seg-time" }, clock(row.start)),
        h("span", { class: "cue-original" }, row.original),
        translation ? h("span", { class: "cue-translation" }, row.translation) : null,
      ),
    ),
  );
  list.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && event.target.matches(".cue-row")) event.target.click();
  });
  return { head, list };
}

// A video whose subtitles are burned into the picture: its tracks stay off unless chosen.
const BURNED = new Set(["subtitled", "dubbed"]);

function mediaElement(item, tracks, preferred) {
  const media = h(item.kind === "video" ? "video" : "audio", {
    id: "player-media",
    class: `player-${item.kind}`,
    controls: true,
    preload: "metadata",
    src: withToken(item.url),
    dataset: { taskId: item.task_id, role: item.role },
  });
  for (const track of tracks) {
    media.append(
      h("track", {
        kind: "subtitles",
        src: withToken(track.url),
        srclang: track.language || "und",
        label: trackLabel(track),
        default: track === preferred && !BURNED.has(item.role),
        dataset: { role: track.role },
      }),
    );
  }
  return media;
}

// What a person picked in a pipeline's player, by pipeline id: the result view is drawn again
// when something changes (the node's id arriving after the page, a translation completing),
// and the new player starts from that pick instead of going back to the first item.
const picked = new Map();

/** Switch `media` to another item, keeping the time (the same timeline in another form). */
function switchMedia(state, item, tracks, preferred) {
  const at = state.media.currentTime || 0;
  const next = mediaElement(item, tracks, preferred);
  next.addEventListener("loadedmetadata", () => (next.currentTime = at), { once: true });
  state.media.replaceWith(next);
  state.media = next;
  for (const fn of state.onMedia) fn(next);
}

/**
 * The player block of a result view, or null when the pipeline has nothing to play here:
 * {section, bindTranscript(list)}; `bindTranscript` makes the transcript's lines (data-start)
 * seek the player too. With `hasTranscript` the cue list is shown only beside a translation
 * (the transcript already lists the original).
 */
export async function playerBlock(tasks, { hasTranscript = false } = {}) {
  if (!playerTasks(tasks).length) return null;
  const pipelineId = tasks[0].pipeline_id;
  let data;
  try {
    data = await get(`/api/v1/pipelines/${encodeURIComponent(pipelineId)}/player`);
  } catch {
    return null;
  }
  const elsewhere = (data.elsewhere || []).map((node) =>
    h("p", { class: "muted small player-elsewhere" }, t("player.elsewhere", { node })),
  );
  if (!data.media.length) {
    if (!elsewhere.length) return null;
    const note = h("section", { class: "result-block result-player" }, ...elsewhere);
    return { section: note, bindTranscript() {}, showPick() {} };
  }
  const original = data.tracks.find((track) => track.role === "original") || null;
  const translation = data.tracks.find((track) => track.role === "translation") || null;
  const tracks = [original, translation].filter(Boolean);
  const preferred = translation || original;
  const pickedIndex = () => {
    const pick = picked.get(pipelineId);
    return data.media.findIndex(
      (item) => pick && item.task_id === pick.task_id && item.role === pick.role,
    );
  };
  const start = Math.max(0, pickedIndex());
  const state = { media: mediaElement(data.media[start], tracks, preferred), onMedia: [], at: start };
  const picker =
    data.media.length > 1
      ? h(
          "select",
          { id: "player-pick", "aria-label": t("player.pick") },
          ...data.media.map((item, i) => h("option", { value: String(i) }, mediaLabel(item))),
        )
      : h("span", { class: "muted small", id: "player-name" }, mediaLabel(data.media[0]));
  if (picker.tagName === "SELECT") {
    picker.value = String(start);
    picker.addEventListener("change", () => {
      state.at = Number(picker.value);
      const item = data.media[state.at];
      picked.set(pipelineId, { task_id: item.task_id, role: item.role });
      switchMedia(state, item, tracks, preferred);
    });
  }
  const section = h(
    "section",
    { class: "result-block result-player", id: "player" },
    h(
      "div",
      { class: "block-head" },
      h("h3", {}, t("player.title")),
      h("span", { class: "spacer" }),
      picker,
    ),
    h("div", { class: "player-frame" }, state.media),
    ...elsewhere,
  );
  // side by side when there are both; one list when no transcript shows the cues
  const first = original || translation;
  const second = original ? translation : null;
  if (first && (second || !hasTranscript)) {
    const { head, list } = cueTable(first, second);
    section.append(h("div", { class: "cue-wrap" }, head, list));
    bind(list, ".cue-row[data-start]");
  }
  function bind(container, selector) {
    seekOnClick(container, () => state.media, selector);
    followTime(container, state.media, selector);
    state.onMedia.push((next) => followTime(container, next, selector));
  }
  return {
    section,
    /**
     * Show what was picked since this player was made: the view builds it, then waits for
     * other reads before it replaces the old player, and a pick can land on the old one then.
     */
    showPick() {
      const i = pickedIndex();
      if (i < 0 || i === state.at || picker.tagName !== "SELECT") return;
      state.at = i;
      picker.value = String(i);
      switchMedia(state, data.media[i], tracks, preferred);
    },
    bindTranscript(list) {
      list.classList.add("seekable");
      for (const li of list.querySelectorAll("[data-start]")) li.title = t("player.seek_hint");
      bind(list, "[data-start]");
    },
  };
}
