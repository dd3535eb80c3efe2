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

// GROUP_MIN is the fewest siblings drawn as one group node: steps with
// the same needs and the same state. Fewer than that read better one by
// one (a three-way translation fan-out).
const GROUP_MIN = 4;

// Sizes of the graph: a node, the gaps between layers and between nodes
// of a layer, an expanded group's tiles and the room under the graph for
// the loops' back edges.
const G = { NW: 150, NH: 34, GX: 56, GY: 12, PAD: 10, TW: 72, TH: 22, TG: 4, HEAD: 22, LOOP: 46 };

// compositionUI is what a person chose on the open composition page, kept
// across the live redraws: the groups expanded (by their needs, so a group
// stays open while its steps change state) and the steps table's filters
// and page.
const compositionUI = { id: "", expanded: new Set(), state: "", name: "", page: 0 };
const STEPS_PER_PAGE = 50;

// graphNodes turns the steps into the graph's nodes: a step on its own,
// or GROUP_MIN or more siblings (same needs, same state, not in a loop)
// as one group, whose edges are its steps' edges. It returns the nodes,
// the node of each step and the edges between nodes (one per pair,
// however many needs).
function graphNodes(steps, loops) {
  const index = new Map(steps.map((s, i) => [s.name, i]));
  const looped = new Set();
  for (const l of loops) { for (const n of l.steps) looped.add(n); looped.add(l.verifier); }
  const classes = new Map();
  steps.forEach((s, i) => {
    const family = [...(s.needs || [])].sort().join(",");
    const k = looped.has(s.name) ? "step|" + s.name : family + "|" + s.state;
    if (!classes.has(k)) classes.set(k, { family, members: [] });
    classes.get(k).members.push(i);
  });
  const nodes = [], of = new Array(steps.length);
  for (const [k, c] of classes) {
    if (c.members.length >= GROUP_MIN && !k.startsWith("step|")) {
      for (const i of c.members) of[i] = nodes.length;
      nodes.push({ id: "group:" + steps[c.members[0]].name, family: c.family, members: c.members, group: true });
    } else {
      for (const i of c.members) { of[i] = nodes.length; nodes.push({ id: steps[i].name, members: [i], group: false }); }
    }
  }
  const seen = new Set(), edges = [];
  steps.forEach((s, i) => {
    for (const n of s.needs || []) {
      const j = index.get(n);
      if (j === undefined || j === i || of[j] === of[i] || seen.has(of[j] + ">" + of[i])) continue;
      seen.add(of[j] + ">" + of[i]);
      edges.push([of[j], of[i]]);
    }
  });
  return { nodes, of, edges };
}

// nodeLayers places each node on the layer of its longest path from a
// root, so every edge points right. A cycle (sagad refuses one) puts a
// node on layer 0 rather than loop.
function nodeLayers(n, edges) {
  const preds = Array.from({ length: n }, () => []);
  for (const [a, b] of edges) preds[b].push(a);
  const layer = new Array(n).fill(-1), visiting = new Array(n).fill(false);
  const depth = (i) => {
    if (layer[i] >= 0) return layer[i];
    if (visiting[i]) return 0;
    visiting[i] = true;
    let l = 0;
    for (const j of preds[i]) l = Math.max(l, depth(j) + 1);
    visiting[i] = false;
    layer[i] = l;
    return l;
  };
  for (let i = 0; i < n; i++) depth(i);
  return layer;
}

// orderLayers orders each layer's nodes by the barycenter of their
// neighbours' places (predecessors on the way down, successors on the way
// up), a few sweeps, so edges cross less (Sugiyama's ordering step). A
// node without neighbours on that side keeps its place.
function orderLayers(layer, edges) {
  const n = layer.length, L = Math.max(0, ...layer) + 1;
  const rows = Array.from({ length: L }, () => []);
  for (let i = 0; i < n; i++) rows[layer[i]].push(i);
  const preds = Array.from({ length: n }, () => []), succs = Array.from({ length: n }, () => []);
  for (const [a, b] of edges) { preds[b].push(a); succs[a].push(b); }
  const place = new Array(n);
  const mark = () => rows.forEach(r => r.forEach((v, k) => { place[v] = (k + 0.5) / r.length; }));
  mark();
  const sweep = (ls, side) => {
    for (const l of ls) {
      const bary = new Map(rows[l].map(v => {
        const ns = side[v];
        return [v, ns.length ? ns.reduce((t, u) => t + place[u], 0) / ns.length : place[v]];
      }));
      rows[l].sort((a, b) => bary.get(a) - bary.get(b) || place[a] - place[b]);
      mark();
    }
  };
  const down = [...Array(L).keys()].slice(1), up = [...Array(L).keys()].reverse().slice(1);
  for (let k = 0; k < 4; k++) { sweep(down, preds); sweep(up, succs); }
  return rows;
}

// groupGrid is how an expanded group lays out its n steps: tiles in up to
// 8 columns, so 256 steps take 8 × 32 tiles rather than a column of 256.
function groupGrid(n) {
  const cols = Math.max(1, Math.min(8, Math.ceil(n / 16)));
  return { cols, rows: Math.ceil(n / cols) };
}

// nodeSize is a node's box: a step's, a closed group's, or an expanded
// group's header over its tiles.
function nodeSize(node, expanded) {
  if (!node.group || !expanded) return { w: G.NW, h: G.NH };
  const g = groupGrid(node.members.length);
  return { w: Math.max(G.NW, g.cols * (G.TW + G.TG) - G.TG + 2 * G.TG), h: G.HEAD + g.rows * (G.TH + G.TG) + G.TG };
}

// layout places the nodes: x by layer (each layer as wide as its widest
// node), y in the layer's order, every layer centred on the tallest.
function layout(nodes, edges, isOpen) {
  const layer = nodeLayers(nodes.length, edges);
  const rows = orderLayers(layer, edges);
  const size = nodes.map(n => nodeSize(n, isOpen(n)));
  const colW = rows.map(r => Math.max(0, ...r.map(v => size[v].w)));
  const colH = rows.map(r => r.reduce((t, v) => t + size[v].h, 0) + Math.max(0, r.length - 1) * G.GY);
  const H = Math.max(G.NH, ...colH);
  const pos = new Array(nodes.length);
  let x = G.PAD;
  rows.forEach((r, l) => {
    let y = G.PAD + (H - colH[l]) / 2;
    for (const v of r) { pos[v] = { x, y, w: size[v].w, h: size[v].h }; y += size[v].h + G.GY; }
    x += colW[l] + G.GX;
  });
  return { pos, W: x - G.GX + G.PAD, H: H + 2 * G.PAD };
}

// stepLink is a step's node or tile: a link to its capsule's page, its
// name, state and capsule in the tooltip.
function stepLink(st) {
  const a = svg("a", { class: "node", "data-step": st.name, "data-state": st.state });
  a.setAttribute("href", safeHref("#/capsule/" + encodeURIComponent(st.capsule_id)));
  a.append(svg("title", {}, st.name + ": " + st.state + (st.halt_reason ? " (" + st.halt_reason + ")" : "") + ", capsule " + st.capsule_id));
  return a;
}

function clip(s, n) { return s.length > n ? s.slice(0, n - 1) + "…" : s; }

// drawStep draws one step at p.
function drawStep(st, p) {
  const a = stepLink(st);
  a.append(svg("rect", { x: p.x, y: p.y, width: G.NW, height: G.NH, rx: 5, fill: STEP_FILL[st.state] || "#f2f4f7", stroke: STEP_STROKE[st.state] || "#98a2b3" }));
  a.append(svg("text", { x: p.x + 8, y: p.y + 14, "font-size": 12, fill: "#1d2330" }, clip(st.name, 20)));
  a.append(svg("text", { x: p.x + 8, y: p.y + 28, "font-size": 10, fill: "#667085" }, st.state));
  return a;
}

// drawGroup draws a group at p: closed, one node with the count that
// opens on a click (or Enter); open, a header that closes it over a tile
// per step, each a link to its capsule.
function drawGroup(node, steps, p, open, toggle) {
  const first = steps[node.members[0]], state = first.state, n = node.members.length;
  const g = svg("g", { class: "group" + (open ? " open" : ""), "data-group": node.id, "data-count": n, "data-state": state });
  const head = svg("g", { class: "group-toggle", role: "button", tabindex: 0, "aria-expanded": open ? "true" : "false" });
  head.append(svg("title", {}, n + " steps " + (open ? "(click to close)" : "(click to show each)") + ": " +
    clip(node.members.map(i => steps[i].name).join(", "), 300)));
  head.addEventListener("click", toggle);
  head.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); toggle(); } });
  const fill = STEP_FILL[state] || "#f2f4f7", stroke = STEP_STROKE[state] || "#98a2b3";
  if (!open) {
    // A stack: two offset boxes behind the front one say "many".
    for (const d of [6, 3]) head.append(svg("rect", { x: p.x + d, y: p.y - d, width: G.NW, height: G.NH, rx: 5, fill: "#fff", stroke }));
    head.append(svg("rect", { x: p.x, y: p.y, width: G.NW, height: G.NH, rx: 5, fill, stroke }));
    head.append(svg("text", { class: "group-count", x: p.x + 8, y: p.y + 14, "font-size": 12, "font-weight": 600, fill: "#1d2330" }, n + " steps"));
    head.append(svg("text", { x: p.x + 8, y: p.y + 28, "font-size": 10, fill: "#667085" }, state + " · " + clip(first.name, 12) + "…"));
    g.append(head);
    return g;
  }
  head.append(svg("rect", { x: p.x, y: p.y, width: p.w, height: p.h, rx: 5, fill: "#fff", stroke }));
  head.append(svg("text", { class: "group-count", x: p.x + 8, y: p.y + 15, "font-size": 12, "font-weight": 600, fill: "#1d2330" }, n + " steps, " + state + " ▾"));
  g.append(head);
  const { cols } = groupGrid(n);
  node.members.forEach((i, k) => {
    const st = steps[i], x = p.x + G.TG + (k % cols) * (G.TW + G.TG), y = p.y + G.HEAD + Math.floor(k / cols) * (G.TH + G.TG);
    const a = stepLink(st);
    a.append(svg("rect", { x, y, width: G.TW, height: G.TH, rx: 3, fill, stroke }));
    a.append(svg("text", { x: x + 4, y: y + 15, "font-size": 10, fill: "#1d2330" }, clip(st.name, 12)));
    g.append(a);
  });
  return g;
}

// edgePath is a curve from a's right side to b's left.
function edgePath(a, b) {
  const x1 = a.x + a.w, y1 = a.y + a.h / 2, x2 = b.x, y2 = b.y + b.h / 2, mx = (x1 + x2) / 2;
  return "M " + x1 + " " + y1 + " C " + mx + " " + y1 + ", " + mx + " " + y2 + ", " + x2 + " " + y2;
}

// loopEdges draws each loop as a loop: a dashed back edge under the
// graph from its verifier to each of its steps, with the round count.
function loopEdges(loops, of, index, pos, bottom) {
  const g = svg("g", { class: "loops" });
  for (const l of loops) {
    const v = index.get(l.verifier);
    if (v === undefined) continue;
    const b = pos[of[v]];
    for (const name of l.steps) {
      const i = index.get(name);
      if (i === undefined) continue;
      const a = pos[of[i]], x1 = b.x + b.w / 2, x2 = a.x + a.w / 2, y1 = b.y + b.h, y2 = a.y + a.h;
      g.append(svg("path", { class: "loop-edge", d: "M " + x1 + " " + y1 + " C " + x1 + " " + (bottom + 20) + ", " + x2 + " " + (bottom + 20) + ", " + x2 + " " + y2,
        fill: "none", stroke: "#b54708", "stroke-width": 1.4, "stroke-dasharray": "5 3", "marker-end": "url(#arrow-loop)", "data-from": l.verifier, "data-to": name }));
      g.append(svg("text", { class: "loop-label", x: (x1 + x2) / 2, y: bottom + 30, "text-anchor": "middle", "font-size": 11, fill: "#b54708", "data-verifier": l.verifier },
        "round " + l.round + " of " + l.max_rounds + " · " + l.state.replace(/_/g, " ")));
    }
  }
  return g;
}

// compositionGraph draws the run's steps as nodes (coloured by state, each
// a link to its capsule's page) laid out in layers left to right (longest
// path, barycentric ordering), siblings grouped, with an edge from every
// need to the step needing it and a back edge per loop. redraw is called
// when a group opens or closes.
function compositionGraph(steps, loops, redraw) {
  loops = loops || [];
  const { nodes, of, edges } = graphNodes(steps, loops);
  const isOpen = (n) => n.group && compositionUI.expanded.has(n.family);
  const { pos, W, H: H0 } = layout(nodes, edges, isOpen);
  const H = H0 + (loops.length ? G.LOOP : 0);
  const s = svg("svg", { id: "composition-graph", viewBox: "0 0 " + W + " " + H, width: W, height: H, role: "img",
    "aria-label": "composition graph: " + steps.length + " steps in " + nodes.length + " nodes" });
  const marker = (id, fill) => svg("marker", { id, viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 6, markerHeight: 6, orient: "auto-start-reverse" },
    svg("path", { d: "M 0 0 L 10 5 L 0 10 z", fill }));
  s.append(svg("defs", {}, marker("arrow", "#98a2b3"), marker("arrow-loop", "#b54708")));
  const g = svg("g", { class: "edges" });
  for (const [a, b] of edges) {
    g.append(svg("path", { class: "edge", d: edgePath(pos[a], pos[b]), fill: "none", stroke: "#98a2b3", "stroke-width": 1.2,
      "marker-end": "url(#arrow)", "data-from": nodes[a].id, "data-to": nodes[b].id }));
  }
  s.append(g);
  const index = new Map(steps.map((st, i) => [st.name, i]));
  if (loops.length) s.append(loopEdges(loops, of, index, pos, H0 - G.PAD));
  nodes.forEach((n, v) => {
    if (!n.group) { s.append(drawStep(steps[n.members[0]], pos[v])); return; }
    const open = isOpen(n);
    s.append(drawGroup(n, steps, pos[v], open, () => {
      if (open) compositionUI.expanded.delete(n.family); else compositionUI.expanded.add(n.family);
      redraw();
    }));
  });
  return s;
}

// stepsTable is the run's steps, filtered by state and by name (a part
// of it) and paged STEPS_PER_PAGE at a time; changing a filter or the
// page redraws the table only.
function stepsTable(steps) {
  const box = el("div", { id: "composition-steps-box" });
  const states = [...new Set(steps.map(s => s.state))].sort();
  const draw = () => {
    const ui = compositionUI, q = ui.name.toLowerCase();
    const shown = steps.filter(s => (!ui.state || s.state === ui.state) && (!q || s.name.toLowerCase().includes(q)));
    const pages = Math.max(1, Math.ceil(shown.length / STEPS_PER_PAGE));
    ui.page = Math.min(ui.page, pages - 1);
    const page = shown.slice(ui.page * STEPS_PER_PAGE, (ui.page + 1) * STEPS_PER_PAGE);
    const turn = (d) => () => { ui.page += d; draw(); };
    box.replaceChildren(
      el("table", { id: "composition-steps" },
        el("thead", {}, el("tr", {}, ["Step", "Needs", "Capsule", "State", "Exit", "Artifact or halt"].map(h => el("th", { text: h })))),
        el("tbody", {}, page.map(s => el("tr", { dataset: { step: s.name } },
          el("td", { class: "mono", text: s.name }), el("td", { class: "mono wrap", text: (s.needs || []).join(", ") || "-" }),
          el("td", {}, el("a", { href: "#/capsule/" + encodeURIComponent(s.capsule_id), class: "mono", title: s.capsule_id, text: shortId(s.capsule_id) })),
          el("td", {}, stateTag(s.state)), el("td", { text: s.exit_code === undefined ? "-" : String(s.exit_code) }),
          el("td", { class: "mono wrap", text: s.halt_reason || s.artifact || "-" }))))),
      el("div", { class: "pager", id: "composition-steps-pager" },
        ui.page > 0 ? el("button", { type: "button", id: "steps-prev", onclick: turn(-1) }, "← previous") : null,
        el("span", { class: "muted", id: "steps-shown", text: (shown.length ? (ui.page * STEPS_PER_PAGE + 1) + "–" + (ui.page * STEPS_PER_PAGE + page.length) : "0") +
          " of " + shown.length + (shown.length < steps.length ? " (of " + steps.length + " steps)" : " steps") + " · page " + (ui.page + 1) + " of " + pages }),
        ui.page + 1 < pages ? el("button", { type: "button", id: "steps-next", onclick: turn(1) }, "next →") : null));
  };
  const stateSel = el("select", { name: "state", id: "steps-state" }, el("option", { value: "", text: "any" }),
    states.map(st => el("option", { value: st, text: st, selected: st === compositionUI.state ? "selected" : false })));
  stateSel.addEventListener("change", () => { compositionUI.state = stateSel.value; compositionUI.page = 0; draw(); });
  const name = el("input", { name: "name", id: "steps-name", placeholder: "name or part of it" });
  name.value = compositionUI.name;
  name.addEventListener("input", () => { compositionUI.name = name.value; compositionUI.page = 0; draw(); });
  draw();
  return el("div", {}, el("form", { class: "filters", id: "steps-filters", onsubmit: (e) => e.preventDefault() },
    el("label", {}, "State", stateSel), el("label", {}, "Name", name)), box);
}

// loopRounds lists a loop's rounds, each round's capsules linked (the
// loop's steps then its verifier) with what the verifier found.
function loopRounds(l) {
  const names = l.steps.concat([l.verifier]);
  // A round before the last is superseded: history of this run, which the
  // inbox leaves out.
  return el("ol", { class: "loop-rounds", dataset: { verifier: l.verifier } }, l.rounds.map((r, i) => el("li", { dataset: { round: String(r.round) } },
    "round " + r.round + (i < l.rounds.length - 1 ? " (superseded)" : "") + ": ",
    r.capsule_ids.map((id, k) => [k ? ", " : "", el("a", { href: "#/capsule/" + encodeURIComponent(id), class: "mono", title: id, text: (names[k] || "step") + " " + shortId(id) })]),
    r.ended ? " · " + (r.passed ? "passed" : r.findings + (r.findings === 1 ? " finding" : " findings")) : " · running")));
}

async function renderComposition(id) {
  const q = new URLSearchParams(location.hash.split("?")[1] || "");
  const p = new URLSearchParams();
  for (const k of ["producer", "run"]) if (q.get(k)) p.set(k, q.get(k));
  const d = await getJSON("/compositions/" + encodeURIComponent(id) + (p.toString() ? "?" + p.toString() : ""));
  const v = el("div", { id: "composition" }, el("h1", {}, "Composition ", el("span", { class: "mono", text: id })));
  if (!d.available) { v.append(el("p", { class: "muted", id: "composition-unavailable", text: d.message })); return v; }
  const o = d.outcome, sm = o.summary;
  const key = id + "|" + (o.producer || "") + "|" + o.run;
  if (compositionUI.id !== key) { compositionUI.id = key; compositionUI.expanded.clear(); compositionUI.state = ""; compositionUI.name = ""; compositionUI.page = 0; }
  compositionKeys = new Set(o.steps.map(s => s.capsule_id));
  for (const l of o.loops || []) for (const r of l.rounds) for (const id of r.capsule_ids) compositionKeys.add(id);
  v.append(el("p", { id: "composition-summary" }, stateTag(o.state), (o.reason ? " (" + o.reason + ")" : "") +
    " run " + o.run + (o.round ? " round " + o.round : "") + (o.producer ? " · producer " + o.producer : "") +
    " · " + sm.passed + " of " + sm.total + " passed, " + sm.failed + " failed · exit code " + sm.exit_code));
  const states = [...new Set(o.steps.map(s => s.state))];
  const wrap = el("div", { class: "graph-wrap" });
  const draw = () => wrap.replaceChildren(compositionGraph(o.steps, o.loops, draw));
  draw();
  const legend = states.map(st => [STEP_FILL[st] || "#f2f4f7", STEP_STROKE[st] || "#98a2b3", "step " + st.replace(/_/g, " ")])
    .concat([["#ffffff", "#98a2b3", "an arrow runs from a step to the step that needs it; a stack is " + GROUP_MIN + " or more siblings, a click shows each"]]);
  if ((o.loops || []).length) legend.push(["#ffffff", "#b54708", "a dashed arrow runs back from a loop's verifier to the steps it sends round again"]);
  v.append(chartFigure(wrap, "composition-figure", legend));
  // Each verification loop: its state, round and the verifier's findings
  // per ended round, each round's capsules; a loop stopped for no
  // progress says who decides how.
  for (const l of o.loops || []) {
    const counts = l.rounds.filter(r => r.ended).map(r => r.findings).join(" ") || "-";
    v.append(el("p", { class: "composition-loop", dataset: { verifier: l.verifier } },
      "Loop " + l.steps.join(", ") + " verified by " + l.verifier + ": ", stateTag(l.state),
      " round " + l.round + " of " + l.max_rounds + " · findings per round " + counts +
      (l.state === "no_progress" ? " · sagactl composition decide " + o.composition_id + " " + l.verifier + " accept|reject --by WHO" : "")));
    v.append(loopRounds(l));
  }
  v.append(el("h2", { text: "Steps" }));
  v.append(stepsTable(o.steps));
  return v;
}
