// sagad console: framework-free. Every capsule field is untrusted input, so
// the DOM is built with createElement and textContent only — never from
// HTML strings — and the Content-Security-Policy runs nothing but this file.
"use strict";

const API = "/ui/api";
const STATES = ["in_progress", "waiting", "paused", "waiting_for_operator", "completed", "halted", "cancelled"];
const PHASES = ["RECEPTION", "REALITY_ANCHOR", "PLANNING", "AUTOMATED_GATES", "EXECUTION", "REVIEW", "HANDOFF"];

// el builds an element: attrs set properties (on*: listeners, dataset,
// class); children are nodes or strings (text nodes, so never parsed).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "class") e.className = v;
    else if (k === "dataset") Object.assign(e.dataset, v);
    else if (k === "text") e.textContent = v;
    else if (k === "href") e.setAttribute("href", safeHref(v));
    else e.setAttribute(k, v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// safeHref keeps links inside the console.
function safeHref(h) { return (typeof h === "string" && (h.startsWith("#/") || h.startsWith("/ui/"))) ? h : "#/"; }

function ago(t) {
  if (!t) return "-";
  const s = Math.max(0, Math.floor((Date.now() - new Date(t).getTime()) / 1000));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + (s % 60) + "s";
  if (s < 86400) return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
  return Math.floor(s / 86400) + "d" + Math.floor((s % 86400) / 3600) + "h";
}
function ts(t) { return t ? new Date(t).toISOString().replace(".000Z", "Z") : "-"; }
function stateTag(s) { return el("span", { class: "state state-" + s, text: s }); }
function capLink(r) { return el("a", { href: "#/capsule/" + encodeURIComponent(r.key), class: "mono", text: r.capsule_id || r.key }); }

function toast(msg, isErr) {
  const d = el("div", { class: isErr ? "error" : "", text: msg });
  document.getElementById("toast").append(d);
  setTimeout(() => d.remove(), isErr ? 8000 : 4000);
}

async function getJSON(path) {
  const r = await fetch(API + path, { credentials: "same-origin" });
  const body = await r.json().catch(() => ({ error: r.statusText }));
  if (!r.ok) throw new Error(body.error || r.statusText);
  return body;
}

async function post(verb, body) {
  const r = await fetch(API + "/actions/" + encodeURIComponent(verb), {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-Sagad-Console": "1" },
    body: JSON.stringify(body),
  });
  const reply = await r.json().catch(() => ({ error: r.statusText }));
  if (!r.ok) throw new Error(reply.error || r.statusText);
  return reply;
}

// ---- confirmation: every action asks, with the operator's name ----

const FIELDS = {
  reason: { label: "Reason", type: "text" },
  rationale: { label: "Rationale (becomes the review finding)", type: "textarea" },
  tokens: { label: "Token cap (empty: unchanged)", type: "number" },
  dollars: { label: "Dollar cap (empty: unchanged)", type: "number", step: "0.01" },
  deadline: { label: "New deadline (RFC 3339, empty keeps it)", type: "text", placeholder: "2030-01-02T15:04:05Z" },
  force: { label: "Force (also resume a capsule awaiting accepted external work)", type: "checkbox" },
  from_phase: { label: "Start at phase (0–6; empty: where it stopped)", type: "number" },
  dependents: { label: "Also replay the capsules halted dependency_failed on it", type: "checkbox", checked: true },
};

function confirmAction(title, text, verb, base, fields) {
  const dlg = document.getElementById("confirm");
  const by = document.getElementById("confirm-by");
  const box = document.getElementById("confirm-fields");
  const errEl = document.getElementById("confirm-error");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  errEl.textContent = "";
  by.value = localStorage.getItem("sagad.operator") || "";
  box.replaceChildren();
  const inputs = {};
  for (const f of fields || []) {
    const d = FIELDS[f];
    const input = d.type === "textarea" ? el("textarea", { name: f, rows: 3 }) :
      el("input", { name: f, type: d.type, step: d.step, placeholder: d.placeholder, min: d.type === "number" ? "0" : undefined, checked: d.checked });
    inputs[f] = input;
    box.append(el("label", {}, d.label, input));
  }
  const form = document.getElementById("confirm-form");
  const onSubmit = async (ev) => {
    if (ev.submitter && ev.submitter.value === "cancel") return;
    ev.preventDefault();
    const name = by.value.trim();
    if (!name) { errEl.textContent = "The operator's name is required: it is recorded with the action."; return; }
    const body = Object.assign({}, base, { by: name });
    for (const [f, input] of Object.entries(inputs)) {
      if (input.type === "checkbox") body[f] = input.checked;
      else if (input.type === "number") { if (input.value !== "") body[f] = Number(input.value); }
      else if (input.value.trim() !== "") body[f] = input.value.trim();
    }
    try {
      await post(verb, body);
      localStorage.setItem("sagad.operator", name);
      dlg.close("done");
      toast(title + ": done");
      refresh();
    } catch (e) {
      errEl.textContent = e.message;
    }
  };
  form.onsubmit = onSubmit;
  dlg.showModal();
  (by.value ? (Object.values(inputs)[0] || document.getElementById("confirm-ok")) : by).focus();
}

function capsuleActions(r) {
  const id = r.key;
  const who = r.capsule_id || r.key;
  const b = (label, cls, fn) => el("button", { class: cls, onclick: fn, dataset: { key: id } }, label);
  const out = [];
  if (r.state === "waiting_for_operator") {
    out.push(b("Accept", "act-accept primary", () => confirmAction("Accept " + who, "The operator gate opens: the reviewed work is accepted and the capsule goes on.", "decide", { id, decision: "accept" })));
    out.push(b("Revise", "act-revise", () => confirmAction("Revise " + who, "EXECUTION runs again, with your rationale as the review's finding.", "decide", { id, decision: "revise" }, ["rationale"])));
    out.push(b("Reject", "act-reject danger", () => confirmAction("Reject " + who, "The capsule halts: the operator rejected the work.", "decide", { id, decision: "reject" }, ["rationale"])));
  }
  if (r.state === "paused") {
    out.push(b("Resume", "act-resume primary", () => confirmAction("Resume " + who, "The capsule resumes where it stopped; the overrides lift its cause.", "resume", { id }, ["reason", "tokens", "dollars", "deadline", "force"])));
  }
  if (r.state === "in_progress" || r.state === "waiting") {
    out.push(b("Pause", "act-pause", () => confirmAction("Pause " + who, "The capsule parks with operator_manual until resumed.", "pause", { id }, ["reason"])));
  }
  if (r.state === "halted" || r.state === "cancelled") {
    out.push(b("Replay", "act-replay", () => confirmAction("Replay " + who, "A new run of the capsule starts from where it stopped (or the phase you give), on the bytes RECEPTION kept.", "replay", { id }, ["reason", "from_phase", "dependents"])));
  }
  if (!["completed", "halted", "cancelled"].includes(r.state)) {
    out.push(b("Cancel", "act-cancel danger", () => confirmAction("Cancel " + who, "The capsule ends cancelled; this cannot be undone.", "cancel", { id }, ["reason"])));
  }
  return el("div", { class: "actions" }, out);
}

function findingsList(fs) {
  if (!fs || !fs.length) return el("span", { class: "muted", text: "no findings" });
  return el("ul", { class: "findings" }, fs.map(f => el("li", {}, f.rule ? "Rule " + f.rule + ": " : "", f.title ? f.title + " — " : "", f.message || "", f.field ? " (" + f.field + ")" : "")));
}

// ---- views ----

const view = () => document.getElementById("view");
let current = { name: "", render: null, key: null };

async function renderInbox() {
  const data = await getJSON("/inbox");
  updateBadge(data.counts.decide + data.counts.paused);
  const v = el("div", { id: "inbox" }, el("h1", { text: "Needs you" }));
  v.append(el("h2", {}, "Waiting for your decision (", String(data.counts.decide), ")"));
  v.append(data.decide.length ? el("table", { id: "inbox-decide" },
    el("thead", {}, el("tr", {}, ["Capsule", "Phase", "Cycle", "Verdict", "Findings", "Waiting", ""].map(h => el("th", { text: h })))),
    el("tbody", {}, data.decide.map(r => el("tr", { dataset: { key: r.key } },
      el("td", {}, capLink(r)), el("td", { text: r.phase_name }), el("td", { text: r.cycle }),
      el("td", { text: r.verdict || "-" }), el("td", {}, findingsList(r.findings)), el("td", { text: ago(r.since) }),
      el("td", {}, capsuleActions(r)))))) : el("p", { class: "muted", text: "Nothing waits for a decision." }));
  v.append(el("h2", {}, "Paused (", String(data.counts.paused), ")"));
  v.append(data.paused.length ? el("table", { id: "inbox-paused" },
    el("thead", {}, el("tr", {}, ["Capsule", "Phase", "Trigger", "Reason", "By", "Age", ""].map(h => el("th", { text: h })))),
    el("tbody", {}, data.paused.map(r => el("tr", { dataset: { key: r.key } },
      el("td", {}, capLink(r)), el("td", { text: r.phase_name }), el("td", { class: "mono", text: r.trigger }),
      el("td", { text: r.reason || "-" }), el("td", { text: r.by || "-" }), el("td", { text: ago(r.since) }),
      el("td", {}, capsuleActions(r)))))) : el("p", { class: "muted", text: "Nothing is paused for a person." }));
  v.append(el("h2", {}, "Waiting (", String(data.counts.waiting), ")"));
  v.append(data.waiting.length ? el("table", { id: "inbox-waiting" },
    el("thead", {}, el("tr", {}, ["Capsule", "Waiting on", "Still pending", "Wave", "Since update", ""].map(h => el("th", { text: h })))),
    el("tbody", {}, data.waiting.map(r => el("tr", { dataset: { key: r.key } },
      el("td", {}, capLink(r)), el("td", { text: r.waiting_on || "-" }), el("td", { class: "mono", text: (r.pending || []).join(", ") || "-" }),
      el("td", { text: r.wave_id || "-" }), el("td", { text: ago(r.updated_at) }), el("td", {}, capsuleActions(r)))))) :
    el("p", { class: "muted", text: "Nothing waits for dependencies or wave capacity." }));
  if (data.truncated) v.append(el("p", { class: "muted", text: "Lists are cut at their limit; filter the capsule list for the rest." }));
  return v;
}

function listParams() {
  const q = new URLSearchParams(location.hash.split("?")[1] || "");
  return q;
}

async function renderCapsules() {
  const q = listParams();
  const data = await getJSON("/capsules?" + q.toString());
  const sel = (name, opts, labels) => el("select", { name }, el("option", { value: "", text: "any" }),
    opts.map((o, i) => { const op = el("option", { value: String(o), text: labels ? labels[i] : o }); if (q.get(name) === String(o)) op.selected = true; return op; }));
  const input = (name, ph) => { const i = el("input", { name, placeholder: ph }); i.value = q.get(name) || ""; return i; };
  const form = el("form", { class: "filters", id: "filters", onsubmit: (ev) => {
    ev.preventDefault();
    const p = new URLSearchParams();
    for (const [k, val] of new FormData(form)) if (val !== "") p.set(k, val);
    location.hash = "#/capsules?" + p.toString();
  } },
  el("label", {}, "Search id", input("q", "id or part of it")),
  el("label", {}, "State", sel("state", STATES)),
  el("label", {}, "Phase", sel("phase", PHASES.map((_, i) => i), PHASES.map((p, i) => i + " " + p))),
  el("label", {}, "Wave", input("wave", "wave id")),
  el("label", {}, "Halt reason", input("halt", "reason or prefix")),
  el("label", {}, "Chain", input("chain", "chain id")),
  el("button", { type: "submit", class: "primary", id: "filter-apply" }, "Filter"));
  const rows = data.items.map(r => rowOf(r));
  const table = el("table", { id: "capsule-list" },
    el("thead", {}, el("tr", {}, ["Capsule", "State", "Phase", "Cycle", "Wave", "Halt reason", "Updated"].map(h => el("th", { text: h })))),
    el("tbody", {}, rows));
  const off = data.offset, lim = data.limit;
  const page = (o) => { const p = listParams(); p.set("offset", String(Math.max(0, o))); return "#/capsules?" + p.toString(); };
  const pager = el("div", { class: "pager" },
    off > 0 ? el("a", { href: page(off - lim), id: "page-prev", text: "← newer" }) : null,
    el("span", { class: "muted", id: "list-total", text: (data.total ? (off + 1) + "–" + (off + data.items.length) : "0") + " of " + data.total }),
    off + lim < data.total ? el("a", { href: page(off + lim), id: "page-next", text: "older →" }) : null);
  return el("div", {}, el("h1", { text: "Capsules" }), form, table, pager);
}

function rowOf(r) {
  return el("tr", { dataset: { key: r.key } },
    el("td", {}, capLink(r)), el("td", { class: "st" }, stateTag(r.state)), el("td", { text: r.phase + " " + r.phase_name }),
    el("td", { text: r.cycle }), el("td", { text: r.wave_id || "-" }), el("td", { class: "mono", text: r.halt_reason || "-" }),
    el("td", { text: ago(r.updated_at), title: ts(r.updated_at) }));
}

function bar(used, cap) {
  if (!cap) return el("span", { class: "muted", text: "no cap" });
  const pct = Math.min(100, Math.round(100 * used / cap));
  const b = el("div", { class: "bar" + (used > cap ? " over" : "") }, el("span"));
  b.firstChild.style.width = pct + "%";
  return b;
}

async function renderCapsule(key) {
  const d = await getJSON("/capsules/" + encodeURIComponent(key));
  const s = d.status, cp = d.checkpoint, c = d.capsule;
  const st = cp.state;
  const dl = (pairs) => el("dl", {}, pairs.map(([k, v]) => [el("dt", { text: k }), el("dd", {}, v === undefined || v === null || v === "" ? "-" : v)]));
  const row = { key: cp.key, capsule_id: cp.capsule_id, state: st.status };
  const v = el("div", { id: "capsule", dataset: { key: cp.key } },
    el("h1", {}, "Capsule ", el("span", { class: "mono", text: cp.capsule_id })),
    el("p", {}, el("span", { id: "capsule-state" }, stateTag(st.status)), " ", c ? c.task.title : "", " ",
      el("span", { class: "muted", text: "updated " + ago(cp.updated_at) + " ago" })),
    capsuleActions(row));
  const budget = d.caps || {};
  v.append(el("div", { class: "grid" },
    el("div", { class: "card" }, el("h2", { text: "State" }), dl([
      ["key", el("span", { class: "mono", text: cp.key })],
      ["phase", st.phase + " " + (st.phase_name || PHASES[st.phase] || "")], ["cycle", String(st.cycle)],
      ["progress", st.progress + "%"], ["halt reason", st.halt_reason], ["wave", cp.wave_id],
      ["trace id", d.trace_url ? traceLink(d.trace_url, cp.trace_id) : el("span", { class: "mono", id: "trace-id", text: cp.trace_id || "-" })],
      ["pause", st.pause ? st.pause.trigger + (st.pause.reason ? ": " + st.pause.reason : "") + (st.pause.by ? " (by " + st.pause.by + ")" : "") : ""],
      ["waiting on", s.waiting_on ? s.waiting_on + ": " + (s.pending || []).join(", ") : ""],
      ["created", ts(cp.created_at)], ["deadline", d.deadline ? ts(d.deadline) : ""],
    ])),
    el("div", { class: "card" }, el("h2", { text: "Budget" }), dl([
      ["tokens", [String(st.budget_used.tokens), " of ", budget.tokens ? String(budget.tokens) : "-", bar(st.budget_used.tokens, budget.tokens)]],
      ["dollars", [String(st.budget_used.dollars), " of ", budget.dollars ? String(budget.dollars) : "-", bar(st.budget_used.dollars, budget.dollars)]],
      ["overrides", st.overrides ? JSON.stringify(st.overrides) : ""],
    ])),
    el("div", { class: "card" }, el("h2", { text: "Locks held" }),
      (st.locks_held && st.locks_held.length) ? el("ul", {}, st.locks_held.map(l => el("li", { class: "mono", text: l }))) : el("p", { class: "muted", text: "none" }),
      el("h2", { text: "Artifacts" }),
      (st.artifact_refs && st.artifact_refs.length) ? el("ul", { id: "artifacts" }, st.artifact_refs.map(ref => el("li", {},
        el("button", { class: "mono", onclick: () => showArtifact(ref) }, ref)))) : el("p", { class: "muted", text: "none" }),
      el("pre", { id: "artifact", hidden: "hidden" })),
  ));
  v.append(el("h2", { text: "Timeline" }));
  v.append((cp.history && cp.history.length) ? el("table", { class: "timeline", id: "timeline" },
    el("thead", {}, el("tr", {}, ["At", "Phase", "Cycle", "Outcome", "Detail"].map(h => el("th", { text: h })))),
    el("tbody", {}, cp.history.map(t => el("tr", {}, el("td", { text: ts(t.at) }), el("td", { text: t.phase + " " + t.phase_name }),
      el("td", { text: t.cycle }), el("td", { class: "outcome-" + t.outcome, text: t.outcome }), el("td", { text: t.detail || "" }))))) :
    el("p", { class: "muted", text: "No transition yet." }));
  v.append(el("h2", { text: "Reviews" }));
  v.append((st.reviews && st.reviews.length) ? el("table", { id: "reviews" },
    el("thead", {}, el("tr", {}, ["Cycle", "Reviewer", "Verdict", "Findings", "At"].map(h => el("th", { text: h })))),
    el("tbody", {}, st.reviews.map(r => el("tr", {}, el("td", { text: r.cycle }), el("td", { text: r.reviewer_id }),
      el("td", { text: r.verdict }), el("td", {}, findingsList(r.findings)), el("td", { text: ts(r.at) }))))) :
    el("p", { class: "muted", text: "No review yet." }));
  v.append(el("h2", { text: "Events" }));
  if (d.events_error) v.append(el("p", { class: "error", text: "events: " + d.events_error }));
  v.append(d.events.length ? el("table", { id: "events" },
    el("thead", {}, el("tr", {}, ["At", "Event", "Phase", "Cycle", "Detail", "By"].map(h => el("th", { text: h })))),
    el("tbody", {}, d.events.map(e => el("tr", {}, el("td", { text: ts(e.at) }), el("td", { class: "mono", text: e.kind }),
      el("td", { text: e.phase + " " + (e.phase_name || "") }), el("td", { text: e.cycle }), el("td", { text: e.detail || "" }), el("td", { text: e.by || "" }))))) :
    el("p", { class: "muted", text: "No events." }));
  if (c) {
    v.append(el("h2", { text: "Capsule as received" }));
    v.append(el("pre", { text: JSON.stringify(c, null, 2) }));
  }
  return v;
}

async function showArtifact(ref) {
  const pre = document.getElementById("artifact");
  pre.hidden = false;
  try {
    const a = await getJSON("/artifact?ref=" + encodeURIComponent(ref));
    pre.textContent = JSON.stringify(a, null, 2);
  } catch (e) { pre.textContent = "cannot read " + ref + ": " + e.message; }
}

async function renderPhases() {
  const d = await getJSON("/phases");
  return el("div", {}, el("h1", { text: "Phases" }),
    el("table", { id: "phases" },
      el("thead", {}, el("tr", {}, ["Phase", "Queued", "In flight", "State", ""].map(h => el("th", { text: h })))),
      el("tbody", {}, d.phases.map(p => el("tr", { dataset: { phase: p.phase } },
        el("td", { text: p.phase + " " + p.phase_name }), el("td", { text: p.pending }), el("td", { text: p.ack_pending }),
        el("td", {}, p.paused ? el("span", { class: "state state-paused", text: "paused" }) : "consuming"),
        el("td", {}, p.paused ?
          el("button", { class: "primary", onclick: () => confirmAction("Resume phase " + p.phase_name, "Every sagad consumes this phase again.", "phase.resume", { phase: p.phase }, ["reason"]) }, "Resume phase") :
          el("button", { onclick: () => confirmAction("Pause phase " + p.phase_name, "Every sagad stops consuming this phase; what is queued stays queued.", "phase.pause", { phase: p.phase }, ["reason"]) }, "Pause phase")))))));
}

async function renderWaves() {
  const d = await getJSON("/waves");
  const v = el("div", { id: "waves" }, el("h1", { text: "Waves" }));
  if (!d.available) { v.append(el("p", { class: "muted", id: "waves-unavailable", text: d.message })); return v; }
  const waves = d.waves || [];
  if (!waves.length) { v.append(el("p", { class: "muted", text: "No wave has a budget." })); return v; }
  const use = (used, reserved, cap) => [String(used), " used, ", String(reserved), " reserved of ", cap ? String(cap) : "no cap", bar(used + reserved, cap)];
  v.append(el("table", { id: "wave-list" },
    el("thead", {}, el("tr", {}, ["Wave", "Tokens", "Dollars", "Running", "Waiting for capacity", "State", ""].map(h => el("th", { text: h })))),
    el("tbody", {}, waves.map(w => el("tr", { dataset: { wave: w.wave_id } },
      el("td", {}, el("a", { href: "#/capsules?wave=" + encodeURIComponent(w.wave_id), class: "mono", text: w.wave_id })),
      el("td", {}, use(w.used.tokens, w.reserved.tokens, w.tokens_cap)),
      el("td", {}, use(w.used.dollars, w.reserved.dollars, w.dollars_cap)),
      el("td", { text: w.running }),
      el("td", { class: "mono", text: (w.waiting || []).join(", ") || "-" }),
      el("td", {}, w.closed ? el("span", { class: "state state-halted", text: "closed" }) : "open"),
      el("td", {}, el("div", { class: "actions" },
        el("button", { onclick: () => confirmAction("Set the caps of wave " + w.wave_id, "New caps (0: none; empty: unchanged). Raising a cap lets the capsules waiting for it go on.", "wave.set", { wave_id: w.wave_id }, ["tokens", "dollars", "reason"]) }, "Set caps"),
        w.closed ? null : el("button", { class: "danger", onclick: () => confirmAction("Close wave " + w.wave_id, "No capsule is admitted to the wave any more; those waiting for it halt.", "wave.close", { wave_id: w.wave_id }, ["reason"]) }, "Close"))))))));
  return v;
}

// ---- routing and live updates ----

function route() {
  const h = location.hash || "#/inbox";
  const [path] = h.slice(1).split("?");
  const parts = path.split("/").filter(Boolean);
  let r;
  if (parts[0] === "capsule" && parts[1]) r = { name: "capsule", key: decodeURIComponent(parts[1]), render: () => renderCapsule(decodeURIComponent(parts[1])) };
  else if (parts[0] === "capsules") r = { name: "capsules", render: renderCapsules };
  else if (parts[0] === "phases") r = { name: "phases", render: renderPhases };
  else if (parts[0] === "waves") r = { name: "waves", render: renderWaves };
  else if (parts[0] === "costs") r = { name: "costs", render: renderCosts };
  else r = { name: "inbox", render: renderInbox };
  current = r;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.id === "nav-" + (r.name === "capsule" ? "capsules" : r.name));
  refresh();
}

let rendering = null, again = false;
async function refresh() {
  if (rendering) { again = true; return; }
  const r = current;
  rendering = (async () => {
    try {
      const node = await r.render();
      if (r === current) view().replaceChildren(node);
    } catch (e) {
      if (r === current) view().replaceChildren(el("p", { class: "error", text: e.message }));
    }
  })();
  await rendering;
  rendering = null;
  if (again) { again = false; setTimeout(refresh, 50); }
}

function updateBadge(n) {
  const b = document.getElementById("inbox-count");
  b.textContent = String(n);
  b.classList.toggle("zero", n === 0);
}

// A change re-reads only what the current view shows, once per burst.
let pending = null;
function soon() { if (!pending) pending = setTimeout(() => { pending = null; refresh(); }, 250); }

let badgePending = null;
function soonBadge() {
  if (!badgePending) badgePending = setTimeout(() => {
    badgePending = null;
    getJSON("/inbox").then(d => updateBadge(d.counts.decide + d.counts.paused)).catch(() => {});
  }, 500);
}

function onChange(row) {
  if (current.name === "inbox") { soon(); return; }
  soonBadge();
  if (current.name === "capsule") { if (row.key === current.key) soon(); return; }
  if (current.name === "waves") { if (row.wave_id) soon(); return; }
  if (current.name === "capsules") {
    const tr = document.querySelector('#capsule-list tr[data-key="' + CSS.escape(row.key) + '"]');
    if (tr && !row.deleted) { const n = rowOf(row); n.classList.add("flash"); tr.replaceWith(n); }
    else soon();
  }
}

function connect() {
  const live = document.getElementById("live");
  const es = new EventSource(API + "/stream");
  es.addEventListener("hello", () => { live.textContent = "live"; live.classList.remove("off"); });
  es.addEventListener("capsule", (ev) => { try { onChange(JSON.parse(ev.data)); } catch (e) { /* ignore a bad event */ } });
  es.addEventListener("resync", () => { soon(); soonBadge(); });
  es.onerror = () => { live.textContent = "reconnecting"; live.classList.add("off"); };
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("confirm-cancel").addEventListener("click", () => document.getElementById("confirm").close("cancel"));
  connect();
  route();
  // The inbox badge follows every change, whatever the view.
  getJSON("/inbox").then(d => updateBadge(d.counts.decide + d.counts.paused)).catch(() => {});
});
