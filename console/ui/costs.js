// sagad console: the Costs page and the trace link. Same rules as app.js:
// the DOM is built element by element, text only, and the chart is SVG made
// with createElementNS and presentation attributes (no inline style, no
// library), so the Content-Security-Policy holds.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const GROUPINGS = ["wave", "chain", "producer", "kind", "day", "composition"];

// traceLink links a trace id to the tracing backend (--trace-url). The URL
// comes from sagad, built from the operator's template and the 32-hex id;
// it is still checked to be http(s) before it becomes a link.
function traceLink(url, id) {
  if (!/^https?:\/\//.test(url)) return el("span", { class: "mono", id: "trace-id", text: id || "-" });
  const a = el("a", { class: "mono", id: "trace-id", text: id || "trace", target: "_blank", rel: "noopener noreferrer" });
  a.setAttribute("href", url); // outside the console on purpose: not through safeHref
  return a;
}

function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  for (const c of children) if (c) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function money(d) { return "$" + (Number(d) || 0).toFixed(2); }
function count(n) { return (Number(n) || 0).toLocaleString("en-US"); }
function share(f) { return (Math.round((Number(f) || 0) * 1000) / 10) + "%"; }

// spendChart draws dollars per day (tokens when nothing cost dollars) as
// bars, the failed part darker, with the scale's top and the first and last
// days written out.
function spendChart(days) {
  const W = 720, H = 180, L = 56, B = 22, T = 10;
  const useDollars = days.some(d => d.dollars > 0);
  const val = d => useDollars ? d.dollars : d.tokens;
  const failed = d => useDollars ? d.failed_dollars : d.failed_tokens;
  const top = Math.max(...days.map(val), useDollars ? 0.01 : 1);
  const n = Math.max(days.length, 1), step = (W - L) / n, bw = Math.min(48, Math.max(2, step * 0.7));
  const y = v => T + (H - T - B) * (1 - v / top);
  const s = svg("svg", { id: "cost-chart", viewBox: "0 0 " + W + " " + H, width: "100%", height: H, role: "img",
    "aria-label": "spend per day, " + (useDollars ? "dollars" : "tokens") });
  s.append(svg("line", { x1: L, y1: H - B, x2: W, y2: H - B, stroke: "#e4e7ec" }));
  s.append(svg("text", { x: L - 6, y: T + 10, "text-anchor": "end", "font-size": 11, fill: "#667085" }, useDollars ? money(top) : count(top)));
  s.append(svg("text", { x: L - 6, y: H - B, "text-anchor": "end", "font-size": 11, fill: "#667085" }, "0"));
  days.forEach((d, i) => {
    const x = L + i * step + (step - bw) / 2;
    const g = svg("g", { class: "cost-bar" });
    g.append(svg("title", {}, d.day + ": " + money(d.dollars) + ", " + count(d.tokens) + " tokens, failed " + money(d.failed_dollars)));
    g.append(svg("rect", { x, y: y(val(d)), width: bw, height: Math.max(0, H - B - y(val(d))), fill: "#2f5bd3" }));
    if (failed(d) > 0) g.append(svg("rect", { x, y: y(failed(d)), width: bw, height: Math.max(0, H - B - y(failed(d))), fill: "#b42318" }));
    s.append(g);
  });
  if (days.length) {
    s.append(svg("text", { x: L, y: H - 6, "font-size": 11, fill: "#667085" }, days[0].day));
    if (days.length > 1) s.append(svg("text", { x: W, y: H - 6, "text-anchor": "end", "font-size": 11, fill: "#667085" }, days[days.length - 1].day));
  }
  return s;
}

// chartFigure puts a chart in a figure with its legend: a swatch and a
// label per series (items: [fill, stroke, label]). Swatches are SVG, which
// the Content-Security-Policy allows where inline styles are not.
function chartFigure(chart, id, items) {
  return el("figure", { class: "chart", id: id }, chart,
    el("ul", { class: "legend" }, items.map(([fill, stroke, label]) => el("li", {},
      svg("svg", { class: "swatch", width: 12, height: 12, viewBox: "0 0 12 12", "aria-hidden": "true" },
        svg("rect", { x: 0.5, y: 0.5, width: 11, height: 11, rx: 2, fill: fill, stroke: stroke || fill })),
      label))));
}

function costParams() {
  const q = new URLSearchParams(location.hash.split("?")[1] || "");
  return { by: GROUPINGS.includes(q.get("by")) ? q.get("by") : "wave", since: q.get("since") || "" };
}

async function renderCosts() {
  const p = costParams();
  const q = new URLSearchParams({ by: p.by });
  if (p.since) q.set("since", p.since);
  const d = await getJSON("/costs?" + q.toString());
  const v = el("div", { id: "costs" }, el("h1", { text: "Costs" }));
  const by = el("select", { name: "by", id: "cost-by" }, GROUPINGS.map(g => el("option", { value: g, text: g, selected: g === p.by ? "selected" : false })));
  const since = el("select", { name: "since", id: "cost-since" }, [["", "all time"], ["24h", "last 24 hours"], ["7d", "last 7 days"], ["30d", "last 30 days"]]
    .map(([val, label]) => el("option", { value: val, text: label, selected: val === p.since ? "selected" : false })));
  const go = () => { const n = new URLSearchParams({ by: by.value }); if (since.value) n.set("since", since.value); location.hash = "#/costs?" + n.toString(); };
  by.addEventListener("change", go);
  since.addEventListener("change", go);
  v.append(el("form", { class: "filters", onsubmit: (e) => { e.preventDefault(); go(); } },
    el("label", {}, "Group by", by), el("label", {}, "Arrived", since)));
  if (!d.available) { v.append(el("p", { class: "muted", id: "costs-unavailable", text: d.message })); return v; }
  const r = d.report, t = r.total;
  v.append(el("div", { class: "grid", id: "cost-totals" },
    el("div", { class: "card" }, el("h2", { text: "Spent" }), el("p", {}, el("strong", { text: money(t.dollars) }), " · " + count(t.tokens) + " tokens · " + count(t.capsules) + " capsules")),
    el("div", { class: "card" }, el("h2", { text: "Failed share" }), el("p", {}, el("strong", { text: share(t.failed_share) }),
      " · " + money(t.failed_dollars) + " by " + count(t.failed_capsules) + " halted or cancelled capsules · " + count(t.failed_attempts) + " failed attempts")),
    el("div", { class: "card" }, el("h2", { text: "Reserved, outstanding" }), el("p", {}, el("strong", { text: money(t.reserved_dollars) }), " · " + count(t.reserved_tokens) + " tokens held by running capsules"))));
  v.append(el("h2", { text: "Spend per day of arrival" }));
  const unit = r.days.some(d => d.dollars > 0) ? "dollars" : "tokens";
  v.append(r.days.length ? chartFigure(spendChart(r.days), "cost-figure", [
    ["#2f5bd3", null, "spent per day of arrival (" + unit + ")"],
    ["#b42318", null, "of which failed: halted or cancelled capsules and failed attempts"],
  ]) : el("p", { class: "muted", text: "Nothing spent yet." }));
  v.append(el("h2", { text: "Per " + r.by }));
  if (r.note) v.append(el("p", { class: "muted", id: "cost-note", text: r.note }));
  const link = (key, name) => {
    if (key === "-" || key === "other") return el("span", { class: "muted", text: key });
    if (r.by === "wave") return waveLink(key, name);
    if (r.by === "chain") return el("a", { href: "#/capsules?chain=" + encodeURIComponent(key), class: "mono", text: key });
    return el("span", { class: "mono", text: key });
  };
  v.append(el("table", { id: "cost-groups" },
    el("thead", {}, el("tr", {}, [r.by, "Capsules", "Tokens", "Dollars", "Failed share", "Failed attempts", "Reserved tokens", "Reserved dollars"].map(h => el("th", { text: h })))),
    el("tbody", {}, r.groups.map(g => el("tr", { dataset: { key: g.key } },
      el("td", {}, link(g.key, g.name)), el("td", { text: count(g.capsules) }), el("td", { text: count(g.tokens) }), el("td", { text: money(g.dollars) }),
      el("td", { text: share(g.failed_share), title: money(g.failed_dollars) + ", " + count(g.failed_tokens) + " tokens" }), el("td", { text: count(g.failed_attempts) }),
      el("td", { text: count(g.reserved_tokens) }), el("td", { text: money(g.reserved_dollars) })))),
  ));
  return v;
}
