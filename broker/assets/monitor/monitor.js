// The broker's web monitor: the overlay from /api/federation, this broker's routing tables
// from /api/routes (with a filter box and paging), its composite detectors and its history
// store. Plain JavaScript, no library; every view is redrawn from the JSON API.
"use strict";

const PAGE = 50;
const REFRESH_MS = 2000;
// The routing tables are read on the broker's routing task: every 10 s, or when asked.
const ROUTES_EVERY = 5;
const SVG = "http://www.w3.org/2000/svg";
// `asked`: the number of the latest routes request; an answer to an older one is dropped.
const state = { offset: 0, filter: "", here: "", asked: 0, ticks: 0, busy: false };

const $ = (id) => document.getElementById(id);

function element(tag, attrs, text) {
  const node = tag.startsWith("svg:")
    ? document.createElementNS(SVG, tag.slice(4))
    : document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

async function api(path) {
  const response = await fetch(path, { cache: "no-store" });
  if (!response.ok) throw new Error(`${path}: ${response.status} ${await response.text()}`);
  return response.json();
}

function idText(id) {
  return id && typeof id === "object" ? `${id.origin}/${id.seq}` : String(id);
}

function rate(n) {
  return n >= 100 ? n.toFixed(0) : n >= 10 ? n.toFixed(1) : n.toFixed(2);
}

// Brokers on a circle, in name order (one broker in the middle); each link labelled with
// the messages per second both ways, its width growing with the rate.
function drawOverlay(view) {
  const svg = $("graph");
  svg.replaceChildren();
  const brokers = view.brokers;
  const byName = new Map(brokers.map((b) => [b.broker, b]));
  const [width, height] = [800, 420];
  const radius = brokers.length > 1 ? Math.min(width, height) / 2 - 60 : 0;
  const at = new Map();
  brokers.forEach((b, i) => {
    const angle = (2 * Math.PI * i) / brokers.length - Math.PI / 2;
    at.set(b.broker, [width / 2 + radius * Math.cos(angle), height / 2 + radius * Math.sin(angle)]);
  });
  let links = 0;
  for (const [a, b] of view.links) {
    if (!at.has(a) || !at.has(b)) continue;
    links += 1;
    const [x1, y1] = at.get(a);
    const [x2, y2] = at.get(b);
    const both = (byName.get(a).rates_out[b] || 0) + (byName.get(b).rates_out[a] || 0);
    const line = element("svg:line", {
      class: "link", x1, y1, x2, y2,
      "stroke-width": 1.5 + Math.min(8, Math.log10(1 + both) * 2),
      "data-link": `${a}-${b}`, "data-rate": rate(both),
    });
    line.append(element("svg:title", {}, `${a} — ${b}: ${rate(both)} messages/s`));
    svg.append(line);
    svg.append(element("svg:text", { class: "link-label", x: (x1 + x2) / 2 + 6, y: (y1 + y2) / 2 - 6 },
      `${rate(both)} msg/s`));
  }
  for (const b of brokers) {
    const [x, y] = at.get(b.broker);
    const group = element("svg:g", {
      class: b.broker === state.here ? "node here" : "node", "data-broker": b.broker,
    });
    group.append(element("svg:circle", { cx: x, cy: y, r: 30 }));
    group.append(element("svg:text", { class: "name", x, y: y + 5, "text-anchor": "middle" }, b.broker));
    const c = b.counters;
    group.append(element("svg:text", { class: "detail", x, y: y + 46, "text-anchor": "middle" },
      `${c.clients ?? 0} clients · ${c.subscriptions ?? 0} subs · ${c.publications_in ?? 0} pubs in`));
    group.append(element("svg:title", {}, JSON.stringify(c, null, 1)));
    svg.append(group);
  }
  svg.setAttribute("data-brokers", brokers.length);
  svg.setAttribute("data-links", links);
}

function fillTable(id, rows, cells) {
  const body = $(id).querySelector("tbody");
  body.replaceChildren(...rows.map((row) => {
    const tr = element("tr", { "data-id": idText(row.id) });
    cells(row).forEach((text, i, all) => tr.append(element("td", i === all.length - 1 ? { class: "text" } : {}, text)));
    return tr;
  }));
}

// "(1–50 of 120 subscriptions)", or with a filter "(… of 3 subscriptions containing “x”, of 120)",
// as the answer says (its own offset and filter).
function count(routes, listed, matched, total, what) {
  const shown = listed ? `${routes.offset + 1}–${routes.offset + listed} of ` : "";
  return routes.filter
    ? `(${shown}${matched} ${what} containing “${routes.filter}”, of ${total})`
    : `(${shown}${total} ${what})`;
}

async function refreshRoutes() {
  const asked = ++state.asked;
  const query = new URLSearchParams({ limit: PAGE, offset: state.offset, filter: state.filter });
  const routes = await api(`/api/routes?${query}`);
  if (asked !== state.asked) return; // a newer request is on its way
  fillTable("srt", routes.srt, (e) => [idText(e.id), e.from, e.text]);
  fillTable("prt", routes.prt, (e) => [idText(e.id), e.from, e.to.join(" "), e.text]);
  fillTable("composites", routes.composites, (e) => [idText(e.id), e.from, e.to.join(" "), e.text]);
  $("srt-count").textContent =
    count(routes, routes.srt.length, routes.srt_matched, routes.srt_total, "advertisements");
  $("prt-count").textContent =
    count(routes, routes.prt.length, routes.prt_matched, routes.prt_total, "subscriptions");
  $("composites-count").textContent = count(routes, routes.composites.length, routes.composites_matched,
    routes.composites_total, "composite subscriptions");
  const most = Math.max(routes.srt_matched, routes.prt_matched, routes.composites_matched);
  $("prev").disabled = routes.offset === 0;
  $("next").disabled = routes.offset + PAGE >= most;
  $("page").textContent = most > PAGE ? `rows ${routes.offset + 1}–${Math.min(most, routes.offset + PAGE)}` : "";
  $("routes").setAttribute("data-loaded", "true");
}

async function refreshDetectors() {
  const view = await api(`/api/detectors?limit=${PAGE}`);
  const listed = view.total > view.detectors.length ? `, the first ${view.detectors.length} listed` : "";
  $("detectors-count").textContent = `(${view.total} here${listed}; ${view.stored} partial matches stored, ` +
    `${view.matches} matches, ${view.evicted} evicted)`;
  const body = $("detector-rows").querySelector("tbody");
  body.replaceChildren(...view.detectors.map((d) => {
    const tr = element("tr");
    const cells = [d.detector, d.pattern, d.subscribers.map((s) => `${s.from} ${idText(s.id)}`).join(", "),
      d.parts.map((p) => `${p.to}: ${p.text}`).join("; "), d.stored, d.stored_bytes, d.matches];
    cells.forEach((text, i) => tr.append(element("td", i === 1 ? { class: "text" } : {}, String(text))));
    return tr;
  }));
}

async function refreshHistory() {
  const store = await api("/api/history");
  const list = $("history-store");
  const rows = store.enabled
    ? [["file", store.path], ["keeps", store.filters.join("  ")], ["durability", store.durability],
       ["indexed", store.indexed.join(" ") || "—"], ["rows", store.rows], ["stored", store.stored],
       ["dropped", store.dropped], ["removed by retention", store.removed], ["queries", store.queries]]
    : [["store", "none: this broker keeps no history"]];
  list.replaceChildren(...rows.flatMap(([k, v]) => [element("dt", {}, k), element("dd", {}, String(v))]));
}

async function refresh() {
  if (state.busy) return; // the last one is still waiting for the broker
  state.busy = true;
  try {
    const stats = await api("/api/stats");
    state.here = stats.broker;
    $("broker").textContent = `broker ${stats.broker} · up ${Math.round(stats.uptime_ms / 1000)} s · ${stats.clients} clients`;
    $("broker").setAttribute("data-broker", stats.broker);
    for (const span of document.querySelectorAll(".this-broker")) span.textContent = stats.broker;
    drawOverlay(await api("/api/federation"));
    if (state.ticks++ % ROUTES_EVERY === 0) await refreshRoutes();
    await refreshDetectors();
    await refreshHistory();
    $("status").textContent = `updated ${new Date().toLocaleTimeString()}`;
    $("status").classList.remove("error");
    document.body.setAttribute("data-ready", "true");
  } catch (error) {
    showError(error);
  } finally {
    state.busy = false;
  }
}

function showError(error) {
  $("status").textContent = `no answer: ${error.message}`;
  $("status").classList.add("error");
}

let typing;
$("filter").addEventListener("input", () => {
  clearTimeout(typing);
  typing = setTimeout(() => {
    state.filter = $("filter").value.trim();
    state.offset = 0;
    refreshRoutes().catch(showError);
  }, 250);
});
$("prev").addEventListener("click", () => {
  state.offset = Math.max(0, state.offset - PAGE);
  refreshRoutes().catch(showError);
});
$("next").addEventListener("click", () => {
  state.offset += PAGE;
  refreshRoutes().catch(showError);
});

// ?filter=TEXT fills the filter box, so that a filtered view can be linked to.
const asked = new URLSearchParams(location.search).get("filter");
if (asked) { $("filter").value = asked; state.filter = asked.trim(); }
refresh();
setInterval(refresh, REFRESH_MS);
