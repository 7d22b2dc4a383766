// Live updates from the node over server-sent events (GET /api/v1/events): a `snapshot` on
// every (re)connect, then `change` events with the rows that changed (and `replicas` when this
// node pulled other owners' rows), and `cluster` updates.
// Pages subscribe with onLive(fn); fn receives {type, data}.

import { get, onTokenChange, withToken } from "./api.js";

export const state = {
  connection: "connecting", // connecting | live | offline
  nodeId: null,
  counts: {},
  cluster: { nodes: [], online: 0 },
  seq: 0,
  // per other owner: when this node last pulled its rows ({pulled_at, age_sec} as the node
  // said, and `received`: performance.now() when it said so)
  replicas: {},
};

/** Keep the newest freshness mark of each owner's replica (`{owner: {pulled_at, age_sec}}`). */
export function noteReplicas(marks) {
  const now = performance.now();
  for (const [owner, mark] of Object.entries(marks || {})) {
    if (!mark) continue;
    const known = state.replicas[owner];
    if (!known || mark.pulled_at >= known.pulled_at) {
      state.replicas[owner] = {
        pulled_at: mark.pulled_at,
        age_sec: mark.age_sec,
        // the owner is not online: {silent_sec, wait_sec (null: takeover off)}
        waiting: mark.waiting || null,
        received: now,
      };
    }
  }
}

export function setCluster(cluster) {
  state.cluster = cluster;
  noteReplicas(cluster.replicas);
}

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
    setCluster(data.cluster);
    state.seq = data.seq;
    setConnection("live");
    emit("snapshot", data);
  });
  source.addEventListener("change", (event) => {
    const data = parse(event);
    if (!data) return;
    state.counts = data.counts;
    state.seq = data.seq;
    if (data.cluster) setCluster(data.cluster);
    noteReplicas(data.replicas);
    emit("change", data);
  });
  source.addEventListener("cluster", (event) => {
    const data = parse(event);
    if (!data) return;
    setCluster(data);
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
