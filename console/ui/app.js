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

// ---- recognisable rows: labels, short ids, numbers, links ----

// labels are the rows' titles and kinds by key, from the latest answers.
let labels = {};
function keepLabels(m) {
  if (!m) return;
  if (Object.keys(labels).length > 5000) labels = {};
  Object.assign(labels, m);
}

// fmtInt writes a count with thousands separators; fmtUSD dollars to the
// cent (spend is summed in floats: 0.060000000000000005 is $0.06).
function fmtInt(n) { return typeof n === "number" ? n.toLocaleString("en-US") : "-"; }
function fmtUSD(x) { return typeof x === "number" ? "$" + x.toLocaleString("en-US", { minimumFractionDigits: 2, maximumFractionDigits: 2 }) : "-"; }

// shortId keeps a UUID's first block: enough to tell rows apart at a
// glance; the whole id is on hover and the copy button.
function shortId(id) { return id && id.length > 13 ? id.slice(0, 8) + "…" : (id || ""); }

function copyButton(text) {
  return el("button", { class: "copy", type: "button", title: "Copy " + text, "aria-label": "copy " + text, onclick: (ev) => {
    ev.preventDefault(); ev.stopPropagation();
    if (navigator.clipboard) navigator.clipboard.writeText(text).then(() => toast("Copied " + text), () => toast("Cannot copy: select the id on the capsule's page", true));
  } }, "copy");
}

// capLink is a capsule's cell: short id (a link; full on hover), copy
// button, kind and title.
function capLink(r) {
  const id = r.capsule_id || r.key;
  const lb = labels[r.key] || {};
  return el("span", { class: "cap" },
    el("a", { href: "#/capsule/" + encodeURIComponent(r.key), class: "mono id", title: id, text: shortId(id) }),
    copyButton(id),
    lb.kind ? el("span", { class: "kind", text: lb.kind }) : null,
    lb.title ? el("span", { class: "title", title: lb.title, text: lb.title }) : null);
}
function capIdLink(id) { return el("a", { href: "#/capsule/" + encodeURIComponent(id), class: "mono id", title: id, text: shortId(id) }); }
function phaseLink(n, name) { return el("a", { href: "#/capsules?phase=" + n, text: n + " " + (name || PHASES[n] || "") }); }
// waveLink links a wave to its capsules. A composition's budget wave
// (composition-<step id>) shows the composition's name, the id on hover.
function waveLink(w, name) {
  if (!w) return "-";
  return el("a", { href: "#/capsules?wave=" + encodeURIComponent(w), class: "mono" + (name ? " wave-named" : ""), title: name ? "wave " + w : w, text: name || w });
}
// waveNameOf names the composition budget wave w of a capsule that is a
// step of a composition (row or checkpoint): the composition's id, with
// #run from run 2, as the capsule's chain says.
function waveNameOf(w, r) {
  const c = r && r.chain;
  if (!w || !w.startsWith("composition-") || !c || !c.id) return "";
  return c.id + (c.run > 1 ? "#" + c.run : "");
}
function chainLink(c) { return c && c.id ? el("a", { href: "#/capsules?chain=" + encodeURIComponent(c.id), class: "mono", title: "chain " + c.id, text: shortId(c.id) + " #" + c.step }) : "-"; }
// pendingLinks shows what a waiting capsule still waits for: its
// dependencies (capsules) or its wave.
function pendingLinks(waitingOn, pending, r) {
  if (!pending || !pending.length) return "-";
  return el("span", { class: "pending" }, pending.map((p, i) => [i ? ", " : "", waitingOn === "wave_capacity" ? waveLink(p, waveNameOf(p, r)) : capIdLink(p)]));
}

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
  rationale: { label: "Rationale (becomes the review finding; a revise's also reaches the executor as your answer)", type: "textarea" },
  answer: { label: "Answer for the executor (e.g. an escalation's resolution; empty: none)", type: "textarea" },
  tokens: { label: "Token cap (empty: unchanged)", type: "number" },
  dollars: { label: "Dollar cap (empty: unchanged)", type: "number", step: "0.01" },
  deadline: { label: "New deadline (RFC 3339, empty keeps it)", type: "text", placeholder: "2030-01-02T15:04:05Z" },
  extend: { label: "Or extend the deadline from now by (e.g. 2h; needed past the deadline)", type: "text", placeholder: "2h" },
  force: { label: "Force (also resume a capsule awaiting accepted external work)", type: "checkbox" },
  from_phase: { label: "Start at phase (0–6; empty: where it stopped)", type: "number" },
  dependents: { label: "Also replay the capsules halted dependency_failed on it", type: "checkbox", checked: true },
  capsule: { label: "Corrected capsule (JSON of the same id; sagad seals it and checks it as an intake, the run starts at RECEPTION)", type: "json" },
};

// confirmAction asks for the operator's name and fields, then does verb
// with them; send, when given, does it instead (a bulk action) and says
// what happened.
function confirmAction(title, text, verb, base, fields, send) {
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
  for (const spec of fields || []) {
    // A field is its name, or [name, initial value].
    const [f, initial] = Array.isArray(spec) ? spec : [spec, undefined];
    const d = FIELDS[f];
    const input = d.type === "textarea" ? el("textarea", { name: f, rows: 3 }) :
      d.type === "json" ? el("textarea", { name: f, rows: 18, class: "mono editor", spellcheck: "false", dataset: { json: "1" } }) :
      el("input", { name: f, type: d.type, step: d.step, placeholder: d.placeholder, min: d.type === "number" ? "0" : undefined, checked: d.checked });
    if (initial !== undefined) input.value = initial;
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
      if (input.dataset.json) {
        try { body[f] = JSON.parse(input.value); } catch (e) { errEl.textContent = "The capsule is not JSON: " + e.message; return; }
      } else if (input.type === "checkbox") body[f] = input.checked;
      else if (input.type === "number") { if (input.value !== "") body[f] = Number(input.value); }
      else if (input.value.trim() !== "") body[f] = input.value.trim();
    }
    try {
      if (send) await send(body); else await post(verb, body);
      localStorage.setItem("sagad.operator", name);
      dlg.close("done");
      if (!send) toast(title + ": done");
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
  if (r.state === "paused" && r.trigger === "agent_query") {
    // Its agent waits for an answer while its call goes on: an answer is
    // the only resume it takes.
    out.push(b("Answer", "act-answer primary", () => confirmAction("Answer " + who, r.reason || "Its agent asked a question.", "resume", { id }, ["answer"])));
  } else if (r.state === "paused") {
    out.push(b("Resume", "act-resume primary", () => confirmAction("Resume " + who, "The capsule resumes where it stopped; the overrides lift its cause.", "resume", { id }, ["reason", "answer", "tokens", "dollars", "deadline", "extend", "force"])));
  }
  // A waiting capsule refuses a pause (capsule/triggers.go PauseRefused):
  // it has spent nothing yet; cancel it or let what it waits for finish.
  if (r.state === "in_progress") {
    out.push(b("Pause", "act-pause", () => confirmAction("Pause " + who, "The capsule parks with operator_manual until resumed.", "pause", { id }, ["reason"])));
  }
  if (r.state === "halted" || r.state === "cancelled") {
    out.push(b("Replay", "act-replay", () => confirmAction("Replay " + who, "A new run of the capsule starts from where it stopped (or the phase you give), on the bytes RECEPTION kept.", "replay", { id }, ["reason", "from_phase", "dependents"])));
    out.push(b("Replay with a corrected capsule", "act-replay-corrected", () => replayCorrected(id, who)));
    out.push(b("Preview replay", "act-replay-preview", () => previewReplay(id)));
  }
  if (!["completed", "halted", "cancelled"].includes(r.state)) {
    out.push(b("Cancel", "act-cancel danger", () => confirmAction("Cancel " + who, "The capsule ends cancelled; this cannot be undone.", "cancel", { id }, ["reason"])));
  }
  return el("div", { class: "actions" }, out);
}

// ruleTitles is the constitution's rule titles by number, learnt from the
// first capsule page read (findings of older sagads carry only numbers).
let ruleTitles = {};

function ruleName(f) { return f.title || ruleTitles[f.rule] || ""; }

function findingsList(fs) {
  if (!fs || !fs.length) return el("span", { class: "muted", text: "no findings" });
  return el("ul", { class: "findings" }, fs.map(f => { const n = ruleName(f); return el("li", {}, f.rule ? "Rule " + f.rule + ": " : "", n ? n + " — " : "", f.message || "", f.field ? " (" + f.field + ")" : ""); }));
}

// findingsTable shows a halt's findings: rule number and name, field,
// message.
function findingsTable(fs, id) {
  return el("table", { class: "findings", id },
    el("thead", {}, el("tr", {}, ["Rule", "Name", "Field", "Message"].map(h => el("th", { text: h })))),
    el("tbody", {}, fs.map(f => el("tr", {}, el("td", { text: f.rule ? String(f.rule) : "-" }), el("td", { text: ruleName(f) || "-" }),
      el("td", { class: "mono", text: f.field || "-" }), el("td", { text: f.message || "" })))));
}

// previewReplay asks sagad what a replay would meet (replay.preview:
// nothing changes) and says it: the halt it would meet, or the agent
// calls it would make.
async function previewReplay(id) {
  try {
    const p = await post("replay.preview", { id, by: localStorage.getItem("sagad.operator") || "console" });
    const calls = (p.agent_calls || []).map(c => c.phase_name + " " + c.agent + " (" + c.work + ")").join(", ");
    const locks = (p.locks || []).filter(l => !l.available).map(l => l.path);
    toast("Replay would start run " + p.run + " at " + p.from_phase_name + ": " +
      (p.would_halt ? "it would halt again, " + p.would_halt : "no halt foreseen" + (calls ? "; calls " + calls : "")) +
      (locks.length ? "; locks held now: " + locks.join(", ") : ""), !!p.would_halt);
  } catch (e) {
    toast("Preview: " + e.message, true);
  }
}

// replayCorrected opens the editor of a corrected capsule on the bytes
// RECEPTION kept (their integrity dropped: the console seals what is sent).
async function replayCorrected(key, who) {
  let text = "";
  try {
    const d = await getJSON("/capsules/" + encodeURIComponent(key));
    const c = d.capsule_raw || d.capsule;
    if (c) { const o = Object.assign({}, c); delete o.integrity; text = JSON.stringify(o, null, 2); }
  } catch (e) { toast("cannot read the capsule: " + e.message, true); }
  confirmAction("Replay " + who + " with a corrected capsule",
    "Edit the capsule and confirm: sagad seals it, checks it as RECEPTION checks an intake (refusing it, with why, if it would halt there) and runs it from RECEPTION as a new run.",
    "replay", { id: key }, [["capsule", text], "reason", "dependents"]);
}

// jsonTree renders a JSON value as nested, collapsible lists (details and
// summary), every key and value as text. Levels deeper than open start
// folded.
function jsonTree(v, open, depth, key) {
  depth = depth || 0;
  const label = key === undefined ? null : el("span", { class: "json-key", text: key + ": " });
  if (v === null || typeof v !== "object") {
    return el("span", {}, label, el("span", { class: "json-" + (v === null ? "null" : typeof v), text: JSON.stringify(v) }));
  }
  const isArr = Array.isArray(v);
  const entries = isArr ? v.map((x, i) => [String(i), x]) : Object.entries(v);
  if (!entries.length) return el("span", {}, label, el("span", { class: "muted", text: isArr ? "[]" : "{}" }));
  return el("details", { class: "json", open: depth < (open === undefined ? 1 : open) ? "open" : undefined },
    el("summary", {}, label, el("span", { class: "muted", text: isArr ? "[" + entries.length + " items]" : "{" + entries.length + " keys}" })),
    el("ul", {}, entries.map(([k, x]) => el("li", {}, jsonTree(x, open, depth + 1, k)))));
}

// dur formats milliseconds as a short duration.
function dur(ms) {
  if (!(ms >= 0)) return "-";
  if (ms < 1000) return Math.round(ms) + "ms";
  const s = ms / 1000;
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + "s";
  if (s < 3600) return Math.floor(s / 60) + "m" + Math.round(s % 60) + "s";
  return Math.floor(s / 3600) + "h" + Math.floor((s % 3600) / 60) + "m";
}

// timelineRows gives each transition its duration (since the previous
// transition, or the capsule's creation) and closes each cycle with its
// total.
function timelineRows(cp, said) {
  const out = [];
  // What people said (status.said) reads in time order among the
  // transitions, each with who and when.
  const words = (said || []).slice();
  const saidRow = w => el("tr", { class: "said" }, el("td", { text: ts(w.at) }), el("td", { class: "muted", text: "operator" }),
    el("td", { text: w.cycle || "" }), el("td", { class: "said-kind", text: w.kind }), el("td"),
    el("td", { class: "wrap" }, el("q", { text: w.text }), w.by ? [" — ", el("strong", { text: w.by })] : null));
  const sayUntil = at => { while (words.length && new Date(words[0].at).getTime() <= at) out.push(saidRow(words.shift())); };
  let prev = new Date(cp.created_at).getTime();
  let cycle = null, cycleStart = prev;
  const total = (c, end) => el("tr", { class: "cycle-total" }, el("td"), el("td", { text: "cycle " + c + " total" }), el("td"), el("td"), el("td", { text: dur(end - cycleStart) }), el("td"));
  let run = null;
  for (const t of cp.history) {
    const at = new Date(t.at).getTime();
    sayUntil(at);
    const r = t.run || 1;
    // A replay starts a new run: the time between runs is the operator's,
    // not a phase's, so the run's first transition has no duration.
    const newRun = run !== null && r !== run;
    if (cycle !== null && (t.cycle !== cycle || newRun)) { out.push(total(cycle, prev)); cycleStart = prev; }
    if (newRun) out.push(el("tr", { class: "run-start" }, el("td", { colspan: "6", text: "run " + r + " (replayed)" })));
    const took = newRun ? "-" : dur(at - prev);
    if (newRun) cycleStart = at;
    run = r;
    cycle = t.cycle;
    out.push(el("tr", {}, el("td", { text: ts(t.at) }), el("td", {}, phaseLink(t.phase, t.phase_name)),
      el("td", { text: t.cycle }), el("td", { class: "outcome-" + t.outcome, text: t.outcome }), el("td", { class: "dur", text: took }), el("td", { text: t.detail || "" })));
    prev = at;
  }
  if (cycle !== null) out.push(total(cycle, prev));
  sayUntil(Infinity);
  return out;
}

// whyStopped explains a halt (or a pause on failures): the reason, the
// findings with their rules, and the failed agent calls of the cycle.
function whyStopped(st) {
  const fs = st.findings || [];
  const a = st.attempts;
  if (!st.halt_reason && !fs.length && !(a && a.failed)) return null;
  const box = el("div", { class: "card why", id: "why" }, el("h2", { text: st.status === "halted" ? "Why it halted" : "Findings and failures" }));
  if (st.halt_reason) box.append(el("p", {}, "Halt reason: ", el("span", { class: "mono", id: "halt-reason", text: st.halt_reason }), " at ", st.phase + " " + (st.phase_name || PHASES[st.phase] || "")));
  if (fs.length) box.append(findingsTable(fs, "halt-findings"));
  if (a && a.failed) {
    const lf = a.last_failure || {};
    box.append(el("h2", { text: "Failed attempts" }),
      el("dl", { id: "attempts" }, [
        ["step", (PHASES[a.phase || 4]) + ", cycle " + a.cycle], ["failed calls", String(a.failed)],
        ["exit code", lf.timeout ? "timed out" : (lf.exit_code !== undefined ? String(lf.exit_code) : "-")],
        ["error", lf.error || "-"],
      ].map(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })])),
      lf.stderr_tail ? el("pre", { class: "stderr", id: "stderr-tail", text: lf.stderr_tail }) : null);
  }
  return box;
}

// ---- views ----

const view = () => document.getElementById("view");
let current = { name: "", render: null, key: null };

async function renderInbox() {
  const data = await getJSON("/inbox");
  keepLabels(data.labels);
  updateBadge(needsYou(data.counts));
  const v = el("div", { id: "inbox" }, el("h1", { text: "Needs you" }), pausedPhasesBanner(data));
  v.append(el("h2", {}, "Waiting for your decision (", String(data.counts.decide), ")"));
  v.append(data.decide.length ? el("table", { id: "inbox-decide" },
    el("thead", {}, el("tr", {}, ["Capsule", "Phase", "Cycle", "Verdict", "Findings", "Waiting", ""].map(h => el("th", { text: h })))),
    el("tbody", {}, data.decide.map(r => el("tr", { dataset: { key: r.key } },
      el("td", {}, capLink(r)), el("td", {}, phaseLink(r.phase, r.phase_name)), el("td", { text: r.cycle }),
      el("td", { text: r.verdict || "-" }), el("td", {}, findingsList(r.findings)), el("td", { text: ago(r.since) }),
      el("td", {}, capsuleActions(r)))))) : el("p", { class: "muted", text: "Nothing waits for a decision." }));
  v.append(el("h2", {}, "Paused (", String(data.counts.paused), ")"));
  v.append(data.paused.length ? el("table", { id: "inbox-paused" },
    el("thead", {}, el("tr", {}, ["Capsule", "Phase", "Trigger", "Reason", "By", "Age", ""].map(h => el("th", { text: h })))),
    el("tbody", {}, data.paused.map(r => el("tr", { dataset: { key: r.key } },
      el("td", {}, capLink(r)), el("td", {}, phaseLink(r.phase, r.phase_name)), el("td", { class: "mono", text: r.trigger }),
      el("td", { class: "wrap" }, r.query ? answerBox(r) : (r.reason || "-")), el("td", { text: r.by || "-" }), el("td", { text: ago(r.since) }),
      el("td", {}, capsuleActions(r)))))) : el("p", { class: "muted", text: "Nothing is paused for a person." }));
  v.append(el("h2", {}, "Waiting (", String(data.counts.waiting), ")"));
  v.append(data.waiting.length ? el("table", { id: "inbox-waiting" },
    el("thead", {}, el("tr", {}, ["Capsule", "Waiting on", "Still pending", "Wave", "Since update", ""].map(h => el("th", { text: h })))),
    el("tbody", {}, data.waiting.map(r => el("tr", { dataset: { key: r.key } },
      el("td", {}, capLink(r)), el("td", { text: r.waiting_on || "-" }), el("td", {}, pendingLinks(r.waiting_on, r.pending, r)),
      el("td", {}, waveLink(r.wave_id, waveNameOf(r.wave_id, r))), el("td", { text: ago(r.updated_at) }), el("td", {}, capsuleActions(r)))))) :
    el("p", { class: "muted", text: "Nothing waits for dependencies or wave capacity." }));
  v.append(inboxHalted(data));
  if (data.truncated) v.append(el("p", { class: "muted", text: "Lists are cut at their limit; filter the capsule list for the rest." }));
  return v;
}

// answerBox is an agent's question in the inbox with a box for the answer:
// sending it asks for the operator's name, then answers through resume.
function answerBox(r) {
  const q = r.query;
  const who = r.capsule_id || r.key;
  const text = el("textarea", { name: "answer", rows: 2, class: "answer-text", placeholder: "Your answer" });
  const send = el("button", { class: "act-send-answer primary", onclick: () => {
    if (!text.value.trim()) { text.focus(); return; }
    confirmAction("Answer " + who, (q.agent || "The agent") + " asks: " + q.prompt, "resume", { id: r.key }, [["answer", text.value]]);
  } }, "Send answer");
  return el("div", { class: "answer-box", dataset: { query: q.id } },
    el("p", {}, el("strong", { text: (q.agent || "the agent") + " asks" }), " ", el("span", { class: "muted", text: "(" + ago(q.since) + " ago" + (q.open > 1 ? ", " + q.open + " open" : "") + ")" })),
    el("p", { class: "question", text: q.prompt }), text, send);
}

// inboxHalted lists the dead letters: halted capsules, which only a replay
// runs again.
function inboxHalted(data) {
  const hs = data.halted || [];
  const n = (data.counts.halted || 0);
  return el("div", {}, el("h2", {}, "Halted — dead letters (", fmtInt(n), ")", n ? [" ", el("a", { href: "#/capsules?state=halted", class: "small", id: "halted-bulk", text: "select them in the list for a bulk replay or cancel" })] : null),
    hs.length ? el("table", { id: "inbox-halted" },
      el("thead", {}, el("tr", {}, ["Capsule", "Phase", "Halt reason", "Since", ""].map(h => el("th", { text: h })))),
      el("tbody", {}, hs.map(r => el("tr", { dataset: { key: r.key } },
        el("td", {}, capLink(r)), el("td", {}, phaseLink(r.phase, r.phase_name)), el("td", { class: "mono wrap", text: r.halt_reason || "-" }),
        el("td", { text: ago(r.updated_at), title: ts(r.updated_at) }), el("td", {}, capsuleActions(r)))))) :
      el("p", { class: "muted", text: "No capsule is halted." }));
}

// pausedPhasesBanner says which phases are paused for every sagad: nothing
// queued for them moves, whatever the lists below say.
function pausedPhasesBanner(data) {
  const ps = data.phases || [];
  if (data.phases_unknown) return el("p", { class: "banner", id: "phases-banner", role: "alert", text: "The phases could not be read: a paused phase may be missing here (see Phases)." });
  if (!ps.length) return null;
  return el("div", { class: "banner", id: "phases-banner", role: "alert" },
    el("strong", { text: ps.length === 1 ? "A phase is paused for every sagad" : ps.length + " phases are paused for every sagad" }),
    el("ul", {}, ps.map(p => el("li", { dataset: { phase: p.phase } },
      phaseLink(p.phase, p.phase_name), " paused",
      p.paused_by ? [" by ", el("strong", { text: p.paused_by })] : null,
      p.paused_at ? [" ", el("span", { title: ts(p.paused_at), text: ago(p.paused_at) + " ago" })] : null,
      p.pause_reason ? [": ", el("span", { class: "wrap", text: p.pause_reason })] : null,
      " — ", fmtInt(p.pending), " waiting", p.ack_pending ? [", ", fmtInt(p.ack_pending), " in flight"] : null, " ",
      el("button", { class: "primary", onclick: () => confirmAction("Resume phase " + p.phase_name, "Every sagad consumes this phase again.", "phase.resume", { phase: p.phase }, ["reason"]) }, "Resume phase")))));
}

// needsYou is the badge's count: paused phases, decisions, paused for a
// person, dead letters.
function needsYou(counts) { return (counts.phases || 0) + (counts.decide || 0) + (counts.paused || 0) + (counts.halted || 0); }

function listParams() {
  const q = new URLSearchParams(location.hash.split("?")[1] || "");
  return q;
}

async function renderCapsules() {
  const q = listParams();
  const data = await getJSON("/capsules?" + q.toString());
  keepLabels(data.labels);
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
  const filter = filterOf(q);
  if (pick.filter !== filter) { pick.keys.clear(); pick.all = false; pick.filter = filter; }
  const rows = data.items.map(r => rowOf(r));
  const pickPage = el("input", { type: "checkbox", id: "pick-page", title: "Select the capsules on this page", "aria-label": "select page",
    onchange: (ev) => { for (const r of data.items) ev.target.checked ? pick.keys.add(r.key) : pick.keys.delete(r.key); pick.all = false; syncPicks(); } });
  pickPage.checked = data.items.length > 0 && data.items.every(r => pick.keys.has(r.key));
  const table = el("table", { id: "capsule-list" },
    el("thead", {}, el("tr", {}, el("th", {}, pickPage), ["Capsule", "State", "Phase", "Cycle", "Wave", "Chain", "Halt reason", "Updated"].map(h => el("th", { text: h })))),
    el("tbody", {}, rows));
  pick.total = data.total;
  const off = data.offset, lim = data.limit;
  const page = (o) => { const p = listParams(); p.set("offset", String(Math.max(0, o))); return "#/capsules?" + p.toString(); };
  const pager = el("div", { class: "pager" },
    off > 0 ? el("a", { href: page(off - lim), id: "page-prev", text: "← newer" }) : null,
    el("span", { class: "muted", id: "list-total", text: (data.total ? (off + 1) + "–" + (off + data.items.length) : "0") + " of " + data.total }),
    off + lim < data.total ? el("a", { href: page(off + lim), id: "page-next", text: "older →" }) : null);
  return el("div", {}, el("h1", { text: "Capsules" }), stateCounts(data.states, q), form, bulkResult(), bulkBar(), table, pager);
}

// stateCounts is the bar of counts per state over the list, each a link
// that filters by it (keeping the other filters).
function stateCounts(states, q) {
  if (!states) return null;
  const link = (st, label, n) => {
    const p = new URLSearchParams(q); p.delete("offset");
    if (st) p.set("state", st); else p.delete("state");
    const on = (q.get("state") || "") === st;
    return el("a", { href: "#/capsules?" + p.toString(), class: "count" + (on ? " active" : ""), dataset: { state: st || "any" } },
      label, " ", el("strong", { text: fmtInt(n) }));
  };
  const all = STATES.reduce((a, s) => a + (states[s] || 0), 0);
  return el("nav", { class: "counts", id: "state-counts" }, link("", "all", all), STATES.map(s => link(s, s.replace(/_/g, " "), states[s] || 0)));
}

// ---- bulk actions: select rows (or every capsule the filter matches),
// then one confirmation for all; the console's bulk endpoint does each
// capsule's action, recorded with the operator's name, and lists what
// failed. ----

// pick is the list's selection: keys picked by hand, or all (every
// capsule the filter matches); it belongs to one filter.
const pick = { keys: new Set(), all: false, filter: null, total: 0 };
let lastBulk = null;
const MAX_BULK = 1000;

// filterOf is the list's query without its page: what "all matching"
// sends.
function filterOf(q) {
  const p = new URLSearchParams(q); p.delete("offset"); p.delete("limit");
  return p.toString();
}

function pickBox(r) {
  const b = el("input", { type: "checkbox", class: "pick", "aria-label": "select " + (r.capsule_id || r.key), dataset: { key: r.key },
    onchange: (ev) => { ev.target.checked ? pick.keys.add(r.key) : pick.keys.delete(r.key); pick.all = false; syncPicks(); } });
  b.checked = pick.all || pick.keys.has(r.key);
  return b;
}

// syncPicks redraws the bar and the boxes after the selection changed.
function syncPicks() {
  const bar = document.getElementById("bulk");
  if (bar) bar.replaceWith(bulkBar());
  const boxes = [...document.querySelectorAll("#capsule-list input.pick")];
  for (const b of boxes) b.checked = pick.all || pick.keys.has(b.dataset.key);
  const page = document.getElementById("pick-page");
  if (page) page.checked = boxes.length > 0 && boxes.every(b => b.checked);
}

function bulkBar() {
  const n = pick.all ? pick.total : pick.keys.size;
  const act = (verb, label, cls, text, fields) => el("button", { id: "bulk-" + verb, class: cls, disabled: n === 0 || n > MAX_BULK ? "disabled" : undefined,
    onclick: async () => {
      // A replay asks sagad first how many would halt again.
      if (verb === "replay") text = await replaySummary(text);
      confirmAction(label + " " + fmtInt(n) + " capsules", text, verb, {}, fields, (body) => sendBulk(verb, label, body));
    } }, label);
  const onPage = document.querySelectorAll("#capsule-list input.pick").length;
  return el("div", { id: "bulk", class: "bulk" + (n ? " on" : "") },
    el("span", { id: "bulk-count", text: n ? fmtInt(n) + (pick.all ? " (all matching)" : "") + " selected" : "Select capsules for a bulk action" }),
    !pick.all && pick.total > pick.keys.size && pick.keys.size >= onPage && onPage > 0 ?
      el("button", { id: "bulk-all", onclick: () => { pick.all = true; pick.keys.clear(); syncPicks(); } }, "Select all " + fmtInt(pick.total) + " matching the filter") : null,
    n > MAX_BULK ? el("span", { class: "error", text: "At most " + fmtInt(MAX_BULK) + " at once: narrow the filter." }) : null,
    n ? el("button", { id: "bulk-clear", onclick: () => { pick.all = false; pick.keys.clear(); syncPicks(); } }, "Clear") : null,
    el("span", { class: "actions" },
      act("cancel", "Cancel", "danger", "Each capsule that has not ended ends cancelled; this cannot be undone. Those that cannot be cancelled are listed.", ["reason"]),
      act("replay", "Replay", "", "Each halted or cancelled capsule runs again from where it stopped, as a new run.", ["reason"]),
      act("accept", "Accept", "", "Each capsule waiting for your decision is accepted and goes on.", ["reason"]),
      act("resume", "Resume", "", "Each paused capsule resumes where it stopped.", ["reason"])));
}

// replaySummary is text with what a dry run of the bulk replay found:
// how many of the selection would halt again (nothing is changed).
async function replaySummary(text) {
  const body = { by: localStorage.getItem("sagad.operator") || "console", dry_run: true };
  if (pick.all) body.filter = pick.filter; else body.ids = [...pick.keys];
  try {
    const r = await fetch(API + "/bulk/replay", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-Sagad-Console": "1" },
      body: JSON.stringify(body),
    });
    const p = await r.json();
    if (!r.ok) throw new Error(p.error || r.statusText);
    const halts = (p.would_halt || []).length;
    return text + " Preview: " + fmtInt(halts) + " of " + fmtInt(p.total) + " would halt again" +
      (halts ? " (" + p.would_halt.slice(0, 3).map(h => h.halt_reason).join("; ") + (halts > 3 ? "; …" : "") + ")" : "") +
      (p.failed.length ? ", " + fmtInt(p.failed.length) + " would be refused" : "") + ".";
  } catch (e) {
    return text + " (Preview failed: " + e.message + ")";
  }
}

async function sendBulk(verb, label, body) {
  if (pick.all) body.filter = pick.filter; else body.ids = [...pick.keys];
  const r = await fetch(API + "/bulk/" + encodeURIComponent(verb), {
    method: "POST", credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-Sagad-Console": "1" },
    body: JSON.stringify(body),
  });
  const reply = await r.json().catch(() => ({ error: r.statusText }));
  if (!r.ok) throw new Error(reply.error || r.statusText);
  lastBulk = Object.assign({ label }, reply);
  pick.keys.clear(); pick.all = false;
  toast(label + ": " + reply.done.length + " of " + reply.total + " done" + (reply.failed.length ? ", " + reply.failed.length + " failed" : ""), reply.failed.length > 0);
}

// bulkResult shows the last bulk action's outcome, its failures each with
// why, until dismissed.
function bulkResult() {
  const r = lastBulk;
  if (!r) return null;
  return el("div", { class: "card bulk-result", id: "bulk-result" },
    el("p", {}, el("strong", { text: r.label + ": " + r.done.length + " of " + r.total + " done" }),
      r.failed.length ? ", " + r.failed.length + " failed:" : ".", " ",
      el("button", { onclick: () => { lastBulk = null; refresh(); } }, "Dismiss")),
    r.failed.length ? el("table", { id: "bulk-failed" }, el("tbody", {}, r.failed.map(f => el("tr", {},
      el("td", {}, capIdLink(f.id)), el("td", { class: "mono", text: f.code || "" }), el("td", { class: "wrap", text: f.error }))))) : null);
}

function rowOf(r) {
  return el("tr", { dataset: { key: r.key } },
    el("td", {}, pickBox(r)), el("td", {}, capLink(r)), el("td", { class: "st" }, stateTag(r.state)), el("td", {}, phaseLink(r.phase, r.phase_name)),
    el("td", { text: r.cycle }), el("td", {}, waveLink(r.wave_id, waveNameOf(r.wave_id, r))), el("td", {}, chainLink(r.chain)), el("td", { class: "mono wrap", text: r.halt_reason || "-" }),
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
  if (d.rule_titles) ruleTitles = d.rule_titles;
  const s = d.status, cp = d.checkpoint, c = d.capsule;
  const st = cp.state;
  const dl = (pairs) => el("dl", {}, pairs.map(([k, v]) => [el("dt", { text: k }), el("dd", {}, v === undefined || v === null || v === "" ? "-" : v)]));
  const row = { key: cp.key, capsule_id: cp.capsule_id, state: st.status, trigger: st.pause && st.pause.trigger, reason: st.pause && st.pause.reason };
  const v = el("div", { id: "capsule", dataset: { key: cp.key } },
    el("h1", {}, c ? el("span", { id: "capsule-title", text: c.task.title }) : "Capsule", " ", el("span", { class: "mono muted", text: cp.capsule_id }), copyButton(cp.capsule_id)),
    el("p", {}, el("span", { id: "capsule-state" }, stateTag(st.status)), " ", c ? el("span", { class: "kind", text: c.task.kind }) : "", " ",
      el("span", { class: "muted", text: "updated " + ago(cp.updated_at) + " ago" })),
    capsuleActions(row));
  const why = whyStopped(st);
  if (why) v.append(why);
  if (s.questions && s.questions.length) {
    v.append(el("div", { class: "card", id: "questions" }, el("h2", { text: "Its agent asks" }),
      el("ul", {}, s.questions.map(q => el("li", {}, el("strong", { text: q.agent || "the agent" }), " (" + ago(q.at) + " ago): ", el("span", { class: "question", text: q.prompt }))))));
  }
  v.append(callCard(s.call));
  const budget = d.caps || {};
  v.append(el("div", { class: "grid" },
    el("div", { class: "card" }, el("h2", { text: "State" }), dl([
      ["key", el("span", { class: "mono", text: cp.key })],
      ["phase", phaseLink(st.phase, st.phase_name)], ["cycle", String(st.cycle)],
      ["progress", st.progress + "%"], ["halt reason", st.halt_reason], ["wave", cp.wave_id ? waveLink(cp.wave_id, waveNameOf(cp.wave_id, cp)) : ""],
      ["chain", cp.chain ? chainLink(cp.chain) : ""],
      ["composition", cp.chain ? el("a", { id: "composition-link", href: compositionHref({ composition_id: cp.chain.id, producer: cp.producer || "", run: cp.chain.run || 1 }), text: "graph" }) : ""],
      ["producer", cp.producer || ""],
      ["trace id", d.trace_url ? traceLink(d.trace_url, cp.trace_id) : el("span", { class: "mono", id: "trace-id", text: cp.trace_id || "-" })],
      ["pause", st.pause ? st.pause.trigger + (st.pause.reason ? ": " + st.pause.reason : "") + (st.pause.by ? " (by " + st.pause.by + ")" : "") : ""],
      ["waiting on", s.waiting_on ? [s.waiting_on + ": ", pendingLinks(s.waiting_on, s.pending, cp)] : ""],
      ["created", ts(cp.created_at)], ["deadline", d.deadline ? ts(d.deadline) : ""],
    ])),
    el("div", { class: "card" }, el("h2", { text: "Budget" }), dl([
      ["tokens", [fmtInt(st.budget_used.tokens), " of ", budget.tokens ? fmtInt(budget.tokens) : "-", bar(st.budget_used.tokens, budget.tokens)]],
      ["dollars", [fmtUSD(st.budget_used.dollars), " of ", budget.dollars ? fmtUSD(budget.dollars) : "-", bar(st.budget_used.dollars, budget.dollars)]],
      ["wave reserved", st.wave_reserved ? fmtInt(st.wave_reserved.tokens) + " tokens, " + fmtUSD(st.wave_reserved.dollars) : ""],
      ["overrides", st.overrides ? jsonTree(st.overrides, 2) : ""],
    ])),
    el("div", { class: "card" }, el("h2", { text: "Locks held" }),
      (st.locks_held && st.locks_held.length) ? el("ul", {}, st.locks_held.map(l => el("li", { class: "mono", text: l }))) : el("p", { class: "muted", text: "none" }),
      el("h2", { text: "Artifacts" }),
      (st.artifact_refs && st.artifact_refs.length) ? el("ul", { id: "artifacts" }, st.artifact_refs.map(ref => el("li", {},
        el("button", { class: "mono", onclick: () => showArtifact(ref) }, ref)))) : el("p", { class: "muted", text: "none" }),
      el("div", { id: "artifact", class: "artifact", hidden: "hidden" })),
  ));
  v.append(el("h2", { text: "Timeline" }));
  v.append((cp.history && cp.history.length) ? el("table", { class: "timeline", id: "timeline" },
    el("thead", {}, el("tr", {}, ["At", "Phase", "Cycle", "Outcome", "Took", "Detail"].map(h => el("th", { text: h })))),
    el("tbody", {}, timelineRows(cp, s.said))) :
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
    el("thead", {}, el("tr", {}, ["At", "Event", "Phase", "Cycle", "Detail", "Findings", "By"].map(h => el("th", { text: h })))),
    el("tbody", {}, d.events.map(e => el("tr", {}, el("td", { text: ts(e.at) }), el("td", { class: "mono", text: e.kind }),
      el("td", { text: e.phase + " " + (e.phase_name || "") }), el("td", { text: e.cycle }), el("td", {}, e.detail || "", (e.said && e.said !== e.detail) ? [e.detail ? " — " : "", el("q", { text: e.said })] : null),
      el("td", {}, (e.findings && e.findings.length) ? findingsList(e.findings) : ""), el("td", { text: e.by || "" }))))) :
    el("p", { class: "muted", text: "No events." }));
  if (c) {
    v.append(el("h2", { text: "Capsule as received" }));
    v.append(el("div", { class: "card", id: "capsule-json" }, jsonTree(d.capsule_raw || c, 1)));
  }
  return v;
}

async function showArtifact(ref) {
  const box = document.getElementById("artifact");
  box.hidden = false;
  try {
    const a = await getJSON("/artifact?ref=" + encodeURIComponent(ref));
    box.replaceChildren(el("p", { class: "mono", text: ref }), jsonTree(a, 2));
  } catch (e) { box.replaceChildren(el("p", { class: "error", text: "cannot read " + ref + ": " + e.message })); }
}

async function renderPhases() {
  const d = await getJSON("/phases");
  return el("div", {}, el("h1", { text: "Phases" }),
    el("table", { id: "phases" },
      el("thead", {}, el("tr", {}, ["Phase", "Queued", "In flight", "State", ""].map(h => el("th", { text: h })))),
      el("tbody", {}, d.phases.map(p => el("tr", { dataset: { phase: p.phase } },
        el("td", {}, phaseLink(p.phase, p.phase_name)), el("td", { text: fmtInt(p.pending) }), el("td", { text: fmtInt(p.ack_pending) }),
        el("td", { class: "wrap" }, p.paused ? [el("span", { class: "state state-paused", text: "paused" }),
          p.paused_by ? [" by ", el("strong", { text: p.paused_by })] : null,
          p.paused_at ? [" ", el("span", { title: ts(p.paused_at), text: ago(p.paused_at) + " ago" })] : null,
          p.pause_reason ? [": ", p.pause_reason] : null] : "consuming"),
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
  const use = (used, reserved, cap, f) => [f(used), " used, ", f(reserved), " reserved of ", cap ? f(cap) : "no cap", bar(used + reserved, cap)];
  v.append(el("table", { id: "wave-list" },
    el("thead", {}, el("tr", {}, ["Wave", "Tokens", "Dollars", "Running", "Waiting for capacity", "State", ""].map(h => el("th", { text: h })))),
    el("tbody", {}, waves.map(w => el("tr", { dataset: { wave: w.wave_id } },
      el("td", {}, waveLink(w.wave_id, w.composition)),
      el("td", {}, use(w.used.tokens, w.reserved.tokens, w.tokens_cap, fmtInt)),
      el("td", {}, use(w.used.dollars, w.reserved.dollars, w.dollars_cap, fmtUSD)),
      el("td", {}, w.running ? el("a", { href: "#/capsules?wave=" + encodeURIComponent(w.wave_id) + "&state=in_progress", text: fmtInt(w.running) }) : "0"),
      el("td", {}, pendingLinks("dependencies", w.waiting)),
      el("td", {}, w.closed ? el("span", { class: "state state-halted", text: "closed" }) : "open"),
      el("td", {}, el("div", { class: "actions" },
        el("button", { onclick: () => confirmAction("Set the caps of wave " + (w.composition ? w.composition + " (" + w.wave_id + ")" : w.wave_id), "New caps (0: none; empty: unchanged). Raising a cap lets the capsules waiting for it go on.", "wave.set", { wave_id: w.wave_id }, ["tokens", "dollars", "reason"]) }, "Set caps"),
        w.closed ? null : el("button", { class: "danger", onclick: () => confirmAction("Close wave " + (w.composition ? w.composition + " (" + w.wave_id + ")" : w.wave_id), "No capsule is admitted to the wave any more; those waiting for it halt.", "wave.close", { wave_id: w.wave_id }, ["reason"]) }, "Close"))))))));
  return v;
}

// callCard shows the agent call running for the capsule in this sagad, as
// its stream shows it so far (hidden when none runs).
function callCard(call) {
  const card = el("div", { class: "card", id: "call" });
  if (!call) { card.hidden = true; return card; }
  const last = call.last_chunk ? call.last_chunk_age_seconds.toFixed(1) + " s ago" : "no chunk yet";
  const dl = (pairs) => el("dl", {}, pairs.map(([k, v]) => [el("dt", { text: k }), el("dd", {}, v === undefined || v === null || v === "" ? "-" : v)]));
  card.append(el("h2", { text: call.done ? "Agent call (ended, being recorded)" : "Agent call (live)" }), dl([
    ["agent", el("span", { class: "mono", id: "call-agent", text: call.agent || "-" })],
    ["subject", call.subject ? el("span", { class: "mono", text: call.subject }) : ""],
    ["step", call.phase + " " + call.phase_name + ", cycle " + call.cycle],
    ["chunks", el("span", { id: "call-chunks", text: fmtInt(call.chunks) })], ["bytes", fmtInt(call.bytes)],
    ["last chunk", last], ["started", ts(call.started)],
  ]), el("pre", { class: "streamed", id: "call-text", text: call.text || "" }));
  return card;
}

// updateCall reads the call of the capsule shown and replaces its card.
async function updateCall(key) {
  try {
    const d = await getJSON("/calls/" + encodeURIComponent(key));
    const old = document.getElementById("call");
    if (old && current.name === "capsule" && current.key === key) old.replaceWith(callCard(d.call));
  } catch (e) { /* the next change tries again */ }
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
  else if (parts[0] === "compositions") r = { name: "compositions", render: renderCompositions };
  else if (parts[0] === "composition" && parts[1]) r = { name: "composition", render: () => renderComposition(decodeURIComponent(parts[1])) };
  else r = { name: "inbox", render: renderInbox };
  current = r;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.id === "nav-" + (r.name === "capsule" ? "capsules" : r.name === "composition" ? "compositions" : r.name));
  refresh();
}

// cardTables puts every table of root in a card of its own, which scrolls
// sideways when a narrow window cannot hold the table: a wide table never
// pushes the page, or its own last columns, off-screen.
function cardTables(root) {
  for (const t of root.querySelectorAll("table")) {
    if (t.parentElement && t.parentElement.classList.contains("table-card")) continue;
    const card = el("div", { class: "table-card" });
    t.replaceWith(card);
    card.append(t);
  }
}

let rendering = null, again = false;
async function refresh() {
  if (rendering) { again = true; return; }
  const r = current;
  rendering = (async () => {
    try {
      const node = await r.render();
      cardTables(node);
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
    getJSON("/inbox").then(d => updateBadge(needsYou(d.counts))).catch(() => {});
  }, 500);
}

function onChange(row) {
  if (current.name === "inbox") { soon(); return; }
  soonBadge();
  if (current.name === "capsule") { if (row.key === current.key) soon(); return; }
  if (current.name === "waves") { if (row.wave_id) soon(); return; }
  if (current.name === "compositions") { if (row.chain) soon(); return; }
  if (current.name === "composition") { if (compositionKeys.has(row.key) || compositionKeys.has(row.capsule_id)) soon(); return; }
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
  es.addEventListener("calls", () => { if (current.name === "capsule") updateCall(current.key); });
  es.onerror = () => { live.textContent = "reconnecting"; live.classList.add("off"); };
}

window.addEventListener("hashchange", route);
document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("confirm-cancel").addEventListener("click", () => document.getElementById("confirm").close("cancel"));
  // Tables a view adds later (a bulk action's results) get their card too;
  // the observer's own wrapping finds nothing more to do.
  new MutationObserver(() => cardTables(view())).observe(view(), { childList: true, subtree: true });
  connect();
  route();
  // The inbox badge follows every change, whatever the view.
  getJSON("/inbox").then(d => updateBadge(needsYou(d.counts))).catch(() => {});
});
