// Live updates from the node over server-sent events (GET /api/v1/events): a `snapshot` on
// every (re)connect, then `change` events with the rows that changed, and `cluster` updates.
// Pages subscribe with onLive(fn); fn receives {type, data}.

import { get, onTokenChange, withToken } from "./api.js";

export const state = {
  connection: "connecting", // connecting | live | offline
  nodeId: null,
  counts: {},
  cluster: { nodes: [], online: 0 },
  seq: 0,
};

const listeners = new Set();
let source = null;
let retryTimer = null;

export function onLive(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

function emit(type, data) {
  for (const fn of [...listeners]) {
    try {
      fn({ type, data });
    } catch (err) {
      console.error("live listener failed", err);
    }
  }
}

function setConnection(value) {
  if (state.connection === value) return;
  state.connection = value;
  emit("connection", { connection: value });
}

function parse(event) {
  try {
    return JSON.parse(event.data);
  } catch {
    return null;
  }
}

export function connect() {
  if (source) source.close();
  clearTimeout(retryTimer);
  setConnection("connecting");
  source = new EventSource(withToken("/api/v1/events"));
  source.addEventListener("snapshot", (event) => {
    const data = parse(event);
    if (!data) return;
    state.nodeId = data.node_id;
    state.counts = data.counts;
    state.cluster = data.cluster;
    state.seq = data.seq;
    setConnection("live");
    emit("snapshot", data);
  });
  source.addEventListener("change", (event) => {
    const data = parse(event);
    if (!data) return;
    state.counts = data.counts;
    state.seq = data.seq;
    if (data.cluster) state.cluster = data.cluster;
    emit("change", data);
  });
  source.addEventListener("cluster", (event) => {
    const data = parse(event);
    if (!data) return;
    state.cluster = data;
    emit("cluster", data);
  });
  source.onerror = () => {
    setConnection("offline");
    // EventSource reconnects by itself after a network error, but gives up for good on an HTTP
    // error status (a 401 in token mode). A plain API call then shows the token prompt, and the
    // stream is reopened with the new token.
    if (source.readyState === EventSource.CLOSED) {
      retryTimer = setTimeout(async () => {
        try {
          await get("/api/v1/status");
        } catch {
          // the node is down: try again later
        }
        connect();
      }, 2000);
    }
  };
}

onTokenChange(() => connect());
