// sagad console: the Compositions pages. Same rules as app.js: the DOM is
// built element by element, text only, and the graph is SVG made with
// createElementNS and presentation attributes (no inline style, no
// library), so the Content-Security-Policy holds. Uses el, svg (costs.js),
// getJSON, stateTag and shortId (app.js).
"use strict";

// Node fills by step state: ended steps as the state tags are coloured,
// live ones by what they wait on.
const STEP_FILL = {
  completed: "#dcfae6", halted: "#fee4e2", cancelled: "#fee4e2", failed: "#fee4e2",
  paused: "#fef0c7", waiting_for_operator: "#fef0c7", waiting: "#f2f4f7", pending: "#f2f4f7",
  in_progress: "#dbe6fe", running: "#dbe6fe",
};
const STEP_STROKE = {
  completed: "#067647", halted: "#b42318", cancelled: "#b42318", failed: "#b42318",
  paused: "#b54708", waiting_for_operator: "#b54708", in_progress: "#2f5bd3", running: "#2f5bd3",
};

// compositionKeys are the capsule ids the open composition page draws:
// a change to one of them redraws it (app.js onChange).
let compositionKeys = new Set();

function compositionHref(c) {
  const q = new URLSearchParams();
  if (c.producer !== undefined) q.set("producer", c.producer === "" ? "-" : c.producer);
  if (c.run) q.set("run", String(c.run));
  return "#/composition/" + encodeURIComponent(c.composition_id) + "?" + q.toString();
}

async function renderCompositions() {
  compositionKeys = new Set();
  const d = await getJSON("/compositions");
  const v = el("div", { id: "compositions" }, el("h1", { text: "Compositions" }));
  if (!d.available) { v.append(el("p", { class: "muted", id: "compositions-unavailable", text: d.message })); return v; }
  if (!d.compositions.length) { v.append(el("p", { class: "muted", text: "No composition yet: sagactl compose FILE sends one." })); return v; }
  v.append(el("table", { id: "composition-list" },
    el("thead", {}, el("tr", {}, ["Composition", "Producer", "Run", "State", "Passed", "Failed", "Steps", "Exit"].map(h => el("th", { text: h })))),
    el("tbody", {}, d.compositions.map(c => el("tr", { dataset: { id: c.composition_id } },
      el("td", {}, el("a", { href: compositionHref({ composition_id: c.composition_id, producer: c.producer || "", run: c.run }), class: "mono", text: c.composition_id })),
      el("td", { class: "mono", text: c.producer || "-" }), el("td", { text: String(c.run) }), el("td", {}, stateTag(c.state)),
      el("td", { text: String(c.summary.passed) }), el("td", { text: String(c.summary.failed) }),
      el("td", { text: String(c.summary.total) }), el("td", { text: String(c.summary.exit_code) }))))));
  return v;
}

// layers places each step on the layer of its longest path from a root (a
// step needing none), so every edge points right. Needs that name no step,
// or a cycle (sagad refuses one), put a step on layer 0 rather than loop.
function layers(steps) {
  const index = new Map(steps.map((s, i) => [s.name, i]));
  const layer = new Array(steps.length).fill(-1);
  const visiting = new Array(steps.length).fill(false);
  const depth = (i) => {
    if (layer[i] >= 0) return layer[i];
    if (visiting[i]) return 0;
    visiting[i] = true;
    let l = 0;
    for (const n of steps[i].needs || []) {
      const j = index.get(n);
      if (j !== undefined && j !== i) l = Math.max(l, depth(j) + 1);
    }
    visiting[i] = false;
    layer[i] = l;
    return l;
  };
  steps.forEach((_, i) => depth(i));
  return layer;
}

// compositionGraph draws the run's steps as nodes (coloured by state, each
// a link to its capsule's page) in layers left to right, with an edge from
// every need to the step needing it.
function compositionGraph(steps) {
  const NW = 150, NH = 34, GX = 60, GY = 14, PAD = 10;
  const layer = layers(steps);
  const rows = [];
  const pos = steps.map((_, i) => {
    const l = layer[i];
    rows[l] = (rows[l] || 0) + 1;
    return { x: PAD + l * (NW + GX), y: PAD + (rows[l] - 1) * (NH + GY) };
  });
  const W = PAD * 2 + Math.max(1, rows.length) * (NW + GX) - GX;
  const H = PAD * 2 + Math.max(1, ...rows.map(n => n || 0)) * (NH + GY) - GY;
  const s = svg("svg", { id: "composition-graph", viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img",
    "aria-label": "composition graph: " + steps.length + " steps" });
  s.append(svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto-start-reverse" },
    svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill: "#98a2b3" }))));
  const index = new Map(steps.map((st, i) => [st.name, i]));
  const edges = svg("g", { class: "edges" });
  steps.forEach((st, i) => {
    for (const n of st.needs || []) {
      const j = index.get(n);
      if (j === undefined || j === i) continue;
      const a = pos[j], b = pos[i];
      const x1 = a.x + NW, y1 = a.y + NH / 2, x2 = b.x, y2 = b.y + NH / 2, mx = (x1 + x2) / 2;
      edges.append(svg("path", { class: "edge", d: "M " + x1 + " " + y1 + " C " + mx + " " + y1 + ", " + mx + " " + y2 + ", " + x2 + " " + y2,
        fill: "none", stroke: "#98a2b3", "stroke-width": 1.2, "marker-end": "url(#arrow)", "data-from": n, "data-to": st.name }));
    }
  });
  s.append(edges);
  steps.forEach((st, i) => {
    const p = pos[i];
    const a = svg("a", { class: "node", "data-step": st.name, "data-state": st.state });
    a.setAttribute("href", safeHref("#/capsule/" + encodeURIComponent(st.capsule_id)));
    a.append(svg("title", {}, st.name + ": " + st.state + (st.halt_reason ? " (" + st.halt_reason + ")" : "") + ", capsule " + st.capsule_id));
    a.append(svg("rect", { x: p.x, y: p.y, width: NW, height: NH, rx: 5, fill: STEP_FILL[st.state] || "#f2f4f7", stroke: STEP_STROKE[st.state] || "#98a2b3" }));
    const name = st.name.length > 20 ? st.name.slice(0, 19) + "…" : st.name;
    a.append(svg("text", { x: p.x + 8, y: p.y + 14, "font-size": 12, fill: "#1d2330" }, name));
    a.append(svg("text", { x: p.x + 8, y: p.y + 28, "font-size": 10, fill: "#667085" }, st.state));
    s.append(a);
  });
  return s;
}

async function renderComposition(id) {
  const q = new URLSearchParams(location.hash.split("?")[1] || "");
  const p = new URLSearchParams();
  for (const k of ["producer", "run"]) if (q.get(k)) p.set(k, q.get(k));
  const d = await getJSON("/compositions/" + encodeURIComponent(id) + (p.toString() ? "?" + p.toString() : ""));
  const v = el("div", { id: "composition" }, el("h1", {}, "Composition ", el("span", { class: "mono", text: id })));
  if (!d.available) { v.append(el("p", { class: "muted", id: "composition-unavailable", text: d.message })); return v; }
  const o = d.outcome, sm = o.summary;
  compositionKeys = new Set(o.steps.map(s => s.capsule_id));
  for (const l of o.loops || []) for (const r of l.rounds) for (const id of r.capsule_ids) compositionKeys.add(id);
  v.append(el("p", { id: "composition-summary" }, stateTag(o.state), (o.reason ? " (" + o.reason + ")" : "") +
    " run " + o.run + (o.round ? " round " + o.round : "") + (o.producer ? " · producer " + o.producer : "") +
    " · " + sm.passed + " of " + sm.total + " passed, " + sm.failed + " failed · exit code " + sm.exit_code));
  const states = [...new Set(o.steps.map(s => s.state))];
  v.append(chartFigure(el("div", { class: "graph-wrap" }, compositionGraph(o.steps)), "composition-figure",
    states.map(st => [STEP_FILL[st] || "#f2f4f7", STEP_STROKE[st] || "#98a2b3", "step " + st.replace(/_/g, " ")])
      .concat([["#ffffff", "#98a2b3", "an arrow runs from a step to the step that needs it"]])));
  // Each verification loop: its state, round and the verifier's findings
  // per ended round; a loop stopped for no progress says who decides how.
  for (const l of o.loops || []) {
    const counts = l.rounds.filter(r => r.ended).map(r => r.findings).join(" ") || "-";
    v.append(el("p", { class: "composition-loop", dataset: { verifier: l.verifier } },
      "Loop " + l.steps.join(", ") + " verified by " + l.verifier + ": ", stateTag(l.state),
      " round " + l.round + " of " + l.max_rounds + " · findings per round " + counts +
      (l.state === "no_progress" ? " · sagactl composition decide " + o.composition_id + " " + l.verifier + " accept|reject --by WHO" : "")));
    // Every round's capsules under it: a round before the last is
    // superseded, history of this run (the inbox leaves it out).
    const names = l.steps.concat([l.verifier]);
    v.append(el("ul", { class: "composition-rounds", dataset: { verifier: l.verifier } }, l.rounds.map((r, i) =>
      el("li", { dataset: { round: String(r.round) } }, "Round " + r.round + " (" + (!r.ended ? "running" : r.passed ? "passed" : r.findings + " findings") +
        (i < l.rounds.length - 1 ? ", superseded" : "") + "): ",
        ...r.capsule_ids.flatMap((id, j) => [j ? ", " : "", (names[j] || "?") + " ",
          el("a", { href: "#/capsule/" + encodeURIComponent(id), class: "mono", title: id, text: shortId(id) })])))));
  }
  v.append(el("h2", { text: "Steps" }));
  v.append(el("table", { id: "composition-steps" },
    el("thead", {}, el("tr", {}, ["Step", "Needs", "Capsule", "State", "Exit", "Artifact or halt"].map(h => el("th", { text: h })))),
    el("tbody", {}, o.steps.map(s => el("tr", { dataset: { step: s.name } },
      el("td", { class: "mono", text: s.name }), el("td", { class: "mono wrap", text: (s.needs || []).join(", ") || "-" }),
      el("td", {}, el("a", { href: "#/capsule/" + encodeURIComponent(s.capsule_id), class: "mono", title: s.capsule_id, text: shortId(s.capsule_id) })),
      el("td", {}, stateTag(s.state)), el("td", { text: s.exit_code === undefined ? "-" : String(s.exit_code) }),
      el("td", { class: "mono wrap", text: s.halt_reason || s.artifact || "-" }))))));
  return v;
}
