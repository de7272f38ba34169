// The broker's web monitor: the overlay from /api/federation, this broker's routing tables
// from /api/routes (with a filter box and paging), its composite detectors and its history
// store, and the workflows the history stores know of (/api/workflows): each application's
// recent generations as job graphs coloured by status, a job's output tail on click.
// Plain JavaScript, no library; every view is redrawn from the JSON API.
"use strict";

const PAGE = 50;
const REFRESH_MS = 2000;
// The routing tables are read on the broker's routing task: every 10 s, or when asked.
const ROUTES_EVERY = 5;
const SVG = "http://www.w3.org/2000/svg";
// `asked`: the number of the latest routes request; an answer to an older one is dropped.
// The workflows are read from the history stores: every other refresh.
const WORKFLOWS_EVERY = 2;
// Generations shown per application, newest first.
const GENERATIONS = 5;
// `job`: the job whose output is shown, as "APPL/GID/JOB".
const state = { offset: 0, filter: "", here: "", asked: 0, ticks: 0, busy: false, job: "" };

const $ = (id) => document.getElementById(id);

function element(tag, attrs, text) {
  const node = tag.startsWith("svg:")
    ? document.createElementNS(SVG, tag.slice(4))
    : document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  if (text !== undefined) node.textContent = text;
  return node;
}

// A broker whose views need a principal (http_views) answers 401, and the routing tables
// and detectors answer 403 to a principal without the routes right: the monitor asks
// once for NAME:TOKEN (if it has none yet), kept for this tab only.
let credentialsAsked = false;

async function api(path) {
  const credentials = sessionStorage.getItem("padres-credentials");
  const headers = credentials ? { Authorization: `Bearer ${credentials}` } : {};
  const response = await fetch(path, { cache: "no-store", headers });
  const refused = response.status === 401 || (response.status === 403 && !credentials);
  if (refused && !credentialsAsked) {
    credentialsAsked = true;
    const given = window.prompt("This broker's views need a principal and its token (NAME:TOKEN):");
    if (given) {
      sessionStorage.setItem("padres-credentials", given.trim());
      return api(path);
    }
  }
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

// The jobs a dependency (an envelope's `after` entry) names.
function needed(need) {
  if (need.after) return [need.after.job];
  if (need.any_of) return need.any_of.flatMap(needed);
  return [];
}

// How far a status has come within an attempt: a job's latest status is that of its latest
// attempt (a retry's `started` after a failure), the furthest within it.
const RANK = { dispatched: 1, started: 2, succeeded: 3, failed: 3, timeout: 3, skipped: 3 };
const FINAL = new Set(["succeeded", "failed", "timeout", "skipped"]);

// Applications from their deployments: per application and agent the latest deploy (an
// undeploy removes the agent's part), its jobs and what each waits for.
function applications(deployments) {
  const parts = new Map(); // appl -> agent -> [time, body]
  for (const d of deployments) {
    if (!d.appl || (d.cmd !== "deploy" && d.cmd !== "undeploy")) continue;
    const byAgent = parts.get(d.appl) || new Map();
    parts.set(d.appl, byAgent);
    const seen = byAgent.get(d.agent);
    if (seen && seen[0] > d.time) continue;
    let body = null;
    if (d.cmd === "deploy") { try { body = JSON.parse(d.body); } catch { body = null; } }
    byAgent.set(d.agent, [d.time, body]);
  }
  const apps = new Map();
  for (const [appl, byAgent] of parts) {
    const jobs = new Map();
    for (const [agent, [, body]] of byAgent) {
      for (const job of (body && body.jobs) || []) {
        jobs.set(job.job, { agent, pool: job.pool ? job.pool.name : "", after: (job.after || []).flatMap(needed) });
      }
    }
    if (jobs.size) apps.set(appl, jobs);
  }
  return apps;
}

// A job graph: columns by depth (the longest chain of predecessors), nodes coloured by
// their latest status; clicking a job shows its output.
function drawGeneration(appl, gid, jobs, latest) {
  const depth = new Map();
  const depthOf = (name, seen = new Set()) => {
    if (depth.has(name)) return depth.get(name);
    if (seen.has(name)) return 0;
    seen.add(name);
    const job = jobs.get(name);
    const d = job && job.after.length ? 1 + Math.max(...job.after.map((a) => depthOf(a, seen))) : 0;
    depth.set(name, d);
    return d;
  };
  const names = [...jobs.keys()].sort();
  names.forEach((n) => depthOf(n));
  const columns = [];
  for (const n of names) (columns[depth.get(n)] ||= []).push(n);
  const [w, h, gapX, gapY] = [120, 28, 40, 14];
  const rows = Math.max(...columns.map((c) => (c || []).length));
  const width = columns.length * (w + gapX) + gapX;
  const height = rows * (h + gapY) + gapY;
  const at = new Map();
  columns.forEach((column, x) => (column || []).forEach((n, y) => at.set(n, [gapX + x * (w + gapX), gapY + y * (h + gapY)])));
  const svg = element("svg:svg", { class: "jobs", viewBox: `0 0 ${width} ${height}`, width, height });
  for (const n of names) {
    for (const a of jobs.get(n).after) {
      if (!at.has(a)) continue;
      const [x1, y1] = at.get(a);
      const [x2, y2] = at.get(n);
      svg.append(element("svg:line", { class: "edge", x1: x1 + w, y1: y1 + h / 2, x2, y2: y2 + h / 2 }));
    }
  }
  let ended = 0;
  for (const n of names) {
    const [x, y] = at.get(n);
    const status = latest.get(n);
    const shown = status ? status.status : "waiting";
    if (FINAL.has(shown)) ended += 1;
    const key = `${appl}/${gid}/${n}`;
    const group = element("svg:g", { class: `job state-${shown}${state.job === key ? " chosen" : ""}`,
      "data-job": n, "data-state": shown });
    group.append(element("svg:rect", { x, y, width: w, height: h, rx: 4 }));
    group.append(element("svg:text", { x: x + w / 2, y: y + h / 2 + 4, "text-anchor": "middle" }, n));
    const runner = status ? status.agent : jobs.get(n).pool ? `pool ${jobs.get(n).pool}` : jobs.get(n).agent;
    group.append(element("svg:title", {}, `${n}: ${shown} · ${runner}`));
    group.addEventListener("click", () => { state.job = key; showOutput(); });
    svg.append(group);
  }
  return [svg, ended === names.length];
}

// The latest status of each job of each generation, by gid then job.
function latestStatuses(statuses) {
  const byGid = new Map();
  for (const s of statuses) {
    const jobs = byGid.get(s.gid) || new Map();
    byGid.set(s.gid, jobs);
    const seen = jobs.get(s.job);
    const [attempt, rank] = [s.attempt || 0, RANK[s.status] || 0];
    const newer = !seen || attempt > (seen.attempt || 0) ||
      (attempt === (seen.attempt || 0) && rank >= (RANK[seen.status] || 0));
    if (newer) jobs.set(s.job, s);
  }
  return byGid;
}

function showOutput() {
  const panel = $("output");
  const [appl, gid, job] = state.job.split("/");
  const status = state.latest && state.latest.get(gid) && state.latest.get(gid).get(job);
  if (!state.job) { panel.hidden = true; return; }
  panel.hidden = false;
  panel.setAttribute("data-job", state.job);
  const line = status
    ? `${appl} ${gid} ${job}: ${status.status} (attempt ${status.attempt ?? 0}, exit ${status.exit ?? 0}) on ${status.agent}` +
      (status.reason ? ` — ${status.reason}` : "")
    : `${appl} ${gid} ${job}: no status yet`;
  $("output-job").textContent = line;
  $("output-text").textContent = status && status.output !== undefined
    ? status.output || "(no output)"
    : FINAL.has(status && status.status) ? "(no output in its status)" : "(not ended yet)";
}

async function refreshWorkflows() {
  const found = await api("/api/workflows?since=1d");
  const apps = applications(found.deployments);
  const latest = latestStatuses(found.statuses);
  state.latest = latest;
  const generations = new Map(); // appl -> [[time, gid, date]]
  for (const t of found.triggers) {
    const list = generations.get(t.appl) || [];
    if (!list.some((g) => g[1] === t.gid)) list.push([t.time, t.gid, t.date]);
    generations.set(t.appl, list);
  }
  const blocks = [];
  for (const [appl, jobs] of [...apps].sort()) {
    const block = element("div", { class: "application", "data-appl": appl });
    const recent = (generations.get(appl) || []).sort((a, b) => (a[0] < b[0] ? 1 : -1)).slice(0, GENERATIONS);
    block.append(element("h3", {}, `${appl} (${jobs.size} jobs; ${recent.length ? `the last ${recent.length} generations` : "no generation in the last day"})`));
    for (const [time, gid, date] of recent) {
      const [svg, done] = drawGeneration(appl, gid, jobs, latest.get(gid) || new Map());
      const div = element("div", { class: "generation", "data-appl": appl, "data-gid": gid, "data-done": String(done) });
      div.append(element("p", { class: "note" }, `${gid} · ${date || "?"} · started ${time} · ${done ? "ended" : "running"}`));
      div.append(svg);
      block.append(div);
    }
    blocks.push(block);
  }
  if (!blocks.length) blocks.push(element("p", { class: "note" }, "no deployment in the history stores (keep agent_ctl, trigger and job_status in one)"));
  if (found.missing.length) blocks.push(element("p", { class: "note" }, `no answer from the history stores at ${found.missing.join(", ")}`));
  $("workflow-list").replaceChildren(...blocks);
  $("workflows").setAttribute("data-loaded", "true");
  showOutput();
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
    if (state.ticks % WORKFLOWS_EVERY === 1 || !$("workflows").hasAttribute("data-loaded")) {
      // The history stores may be slow or away: that shows here, the rest goes on.
      await refreshWorkflows().catch((error) => {
        $("workflow-list").replaceChildren(element("p", { class: "note error" }, `workflows: ${error.message}`));
      });
    }
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
// ?job=APPL/GID/JOB shows that job's output, as a click on it does.
state.job = new URLSearchParams(location.search).get("job") || "";
refresh();
setInterval(refresh, REFRESH_MS);
