// A pipeline's DAG as SVG: layered layout by depth (longest path from a root), ordered within a
// layer by the mean position of the parents to keep edges short; nodes coloured by status. In a
// cluster each node also names the node that runs the task (its owner is in the tooltip).

import { t, typeName } from "./i18n.js";
import { displayStatus, h, typeIcon } from "./dom.js";
import { nodeName, ownerOf } from "./owners.js";

const NODE_W = 184;
const NODE_H = 56;
const EXECUTOR_H = 16; // the extra line naming the executor (cluster view)
const GAP_X = 72;
const GAP_Y = 16;
const PAD = 16;

/** {nodes: [{task, x, y}], edges: [{from, to}], width, height} for tasks in creation order,
 * with boxes `nodeH` high. */
export function layout(tasks, nodeH = NODE_H) {
  const byId = new Map(tasks.map((task) => [task.id, task]));
  const depth = new Map();
  const visiting = new Set();
  const depthOf = (task) => {
    if (depth.has(task.id)) return depth.get(task.id);
    if (visiting.has(task.id)) return 0; // a cycle cannot be stored, but never loop on one
    visiting.add(task.id);
    let d = 0;
    for (const parent of task.depends_on || []) {
      const p = byId.get(parent);
      if (p) d = Math.max(d, depthOf(p) + 1);
    }
    visiting.delete(task.id);
    depth.set(task.id, d);
    return d;
  };
  const layers = [];
  tasks.forEach((task, index) => {
    const d = depthOf(task);
    (layers[d] ||= []).push({ task, order: index });
  });
  const position = new Map(); // id -> index within its layer
  for (const layer of layers) {
    if (!layer) continue;
    for (const item of layer) {
      const parents = (item.task.depends_on || []).filter((id) => position.has(id));
      item.key = parents.length
        ? parents.reduce((sum, id) => sum + position.get(id), 0) / parents.length
        : item.order;
    }
    layer.sort((a, b) => a.key - b.key || a.order - b.order);
    layer.forEach((item, i) => position.set(item.task.id, i));
  }
  const tallest = Math.max(1, ...layers.map((layer) => (layer ? layer.length : 0)));
  const height = PAD * 2 + tallest * nodeH + (tallest - 1) * GAP_Y;
  const nodes = [];
  layers.forEach((layer, d) => {
    if (!layer) return;
    const used = layer.length * nodeH + (layer.length - 1) * GAP_Y;
    const top = (height - used) / 2;
    layer.forEach((item, i) => {
      nodes.push({ task: item.task, x: PAD + d * (NODE_W + GAP_X), y: top + i * (nodeH + GAP_Y) });
    });
  });
  const edges = [];
  for (const task of tasks) {
    for (const parent of task.depends_on || []) {
      if (byId.has(parent)) edges.push({ from: parent, to: task.id });
    }
  }
  const width = PAD * 2 + layers.length * NODE_W + Math.max(0, layers.length - 1) * GAP_X;
  return { nodes, edges, width, height };
}

function structureKey(tasks, cluster) {
  const key = tasks.map((task) => `${task.id}<${(task.depends_on || []).join(",")}`).join(";");
  return `${cluster ? "c" : "l"}:${key}`;
}

/** Draw (or update in place) the DAG of `tasks` into `container`; `cluster`: name each task's
 * executor in its box. */
export function drawDag(container, tasks, { selected, onSelect, refs = new Map(), cluster = false }) {
  const key = structureKey(tasks, cluster);
  let svg = container.querySelector("svg.dag");
  if (!svg || svg.dataset.key !== key) {
    svg = buildSvg(tasks, onSelect, cluster ? NODE_H + EXECUTOR_H : NODE_H);
    svg.dataset.key = key;
    container.replaceChildren(svg);
  }
  const byId = new Map(tasks.map((task) => [task.id, task]));
  for (const g of svg.querySelectorAll("g.dag-node")) {
    const task = byId.get(g.dataset.taskId);
    if (task) updateNode(g, task, task.id === selected, refs.get(task.id));
  }
  for (const path of svg.querySelectorAll("path.edge")) {
    const parent = byId.get(path.dataset.from);
    path.setAttribute("class", `edge edge-${parent ? displayStatus(parent) : "waiting"}`);
  }
}

function buildSvg(tasks, onSelect, nodeH) {
  const { nodes, edges, width, height } = layout(tasks, nodeH);
  const at = new Map(nodes.map((n) => [n.task.id, n]));
  const svg = h("svg:svg", {
    class: "dag",
    width,
    height,
    viewBox: `0 0 ${width} ${height}`,
    role: "img",
    "aria-label": t("pipeline.dag"),
  });
  svg.append(
    h(
      "svg:defs",
      {},
      h(
        "svg:marker",
        {
          id: "dag-arrow",
          viewBox: "0 0 10 10",
          refX: 9,
          refY: 5,
          markerWidth: 7,
          markerHeight: 7,
          orient: "auto-start-reverse",
        },
        h("svg:path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow" }),
      ),
    ),
  );
  const edgeGroup = h("svg:g", { class: "edges" });
  for (const edge of edges) {
    const a = at.get(edge.from);
    const b = at.get(edge.to);
    const x1 = a.x + NODE_W;
    const y1 = a.y + nodeH / 2;
    const x2 = b.x - 2;
    const y2 = b.y + nodeH / 2;
    const mid = (x1 + x2) / 2;
    edgeGroup.append(
      h("svg:path", {
        class: "edge",
        d: `M ${x1} ${y1} C ${mid} ${y1}, ${mid} ${y2}, ${x2} ${y2}`,
        "marker-end": "url(#dag-arrow)",
        dataset: { from: edge.from, to: edge.to },
      }),
    );
  }
  const nodeGroup = h("svg:g", { class: "nodes" });
  for (const node of nodes) {
    const g = h(
      "svg:g",
      {
        class: "dag-node",
        transform: `translate(${node.x},${node.y})`,
        tabindex: 0,
        role: "button",
        dataset: { taskId: node.task.id },
      },
      h("svg:rect", { class: "dag-box", width: NODE_W, height: nodeH, rx: 9 }),
      h("svg:text", { class: "dag-title", x: 12, y: 22 }),
      h("svg:text", { class: "dag-sub", x: 12, y: 41 }),
      h("svg:text", { class: "dag-ref", x: NODE_W - 10, y: 41, "text-anchor": "end" }),
      nodeH > NODE_H ? h("svg:text", { class: "dag-executor", x: 12, y: 58 }) : null,
      h("svg:rect", {
        class: "dag-track",
        x: 9,
        y: nodeH - 7,
        width: NODE_W - 18,
        height: 3,
        rx: 1.5,
      }),
      h("svg:rect", { class: "dag-fill", x: 9, y: nodeH - 7, width: 0, height: 3, rx: 1.5 }),
      h("svg:title", {}),
    );
    const select = () => onSelect(node.task.id);
    g.addEventListener("click", select);
    g.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") select();
    });
    nodeGroup.append(g);
  }
  svg.append(edgeGroup, nodeGroup);
  return svg;
}

function updateNode(g, task, selected, ref) {
  const status = displayStatus(task);
  g.setAttribute("class", `dag-node st-${status}${selected ? " selected" : ""}`);
  g.dataset.status = status;
  const name = typeName(task.type);
  const title = `${typeIcon(task.type)} ${name}`;
  g.querySelector(".dag-title").textContent = title.length > 22 ? `${title.slice(0, 21)}…` : title;
  const pct = status === "completed" ? 100 : Math.max(0, Math.min(100, task.progress || 0));
  const showPct = !["waiting", "skipped", "cancelled"].includes(status);
  g.querySelector(".dag-sub").textContent =
    `${t(`status.${status}`)}${showPct ? ` · ${pct}%` : ""}`;
  g.querySelector(".dag-fill").setAttribute("width", String(((NODE_W - 18) * pct) / 100));
  g.querySelector(".dag-ref").textContent =
    ref && ref.length > 12 ? `${ref.slice(0, 11)}…` : ref || "";
  const executor = g.querySelector(".dag-executor");
  if (executor) {
    const name = task.claimed_by ? t("dag.executor", { node: nodeName(task.claimed_by) }) : "";
    executor.textContent = name.length > 26 ? `${name.slice(0, 25)}…` : name;
    executor.dataset.node = task.claimed_by || "";
  }
  const who = [t("owner.owner_of", { node: nodeName(ownerOf(task)) })];
  if (task.claimed_by) who.push(t("dag.executor", { node: nodeName(task.claimed_by) }));
  g.querySelector("title").textContent =
    `${task.type}${ref ? ` (${ref})` : ""} · ${task.id}\n${who.join(" · ")}`;
}
