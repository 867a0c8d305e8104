// gangway console: renders the server's fold (GET /api/view, /api/stream, /api/job) and follows it
// live through server-sent events (/api/live). No framework; charts with the vendored Chart.js.
"use strict";

const $ = (sel) => document.querySelector(sel);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const gpuText = (milli) => { const g = milli / 1000; return Number.isInteger(g) ? String(g) : g.toFixed(2).replace(/0+$/, ""); };
// a quantity in milli units, for people: memory in GiB/TiB, the rest as a number
const qty = (milli, resource) => {
  if (milli == null) return "—";
  if (resource === "memory" && milli) { const gi = milli / 1000 / 2 ** 30; return gi >= 1024 ? `${+(gi / 1024).toFixed(2)} Ti` : `${+gi.toFixed(1)} Gi`; }
  return gpuText(milli);
};
const levelName = (level, name) => name.toLowerCase().startsWith(level) ? name : `${level} ${name}`;
const clock = (ms) => ms ? new Date(ms).toISOString().slice(11, 19) : "-";
const day = (ms) => ms ? new Date(ms).toISOString().slice(0, 19).replace("T", " ") + " UTC" : "-";
const rel = (ms, now) => { if (ms == null) return "not within a week"; const s = Math.round((ms - now) / 1000);
  if (s <= 0) return "now"; if (s < 90) return `in ${s} s`; if (s < 5400) return `in ${Math.round(s / 60)} min`; return `in ${(s / 3600).toFixed(1)} h`; };

let VIEW = null;           // the latest /api/view
let STREAM = [];           // latest events, newest first
let JOB = null;            // the job page's data
let jobLoaded = 0;         // when it was last fetched (ms)
const charts = {};

// --- routing ---------------------------------------------------------------------------------

function route() {
  const hash = decodeURIComponent(location.hash.slice(1)) || "map";
  const [tab, arg] = hash.startsWith("job=") ? ["job", hash.slice(4)] : [hash, null];
  document.querySelectorAll("section.tab").forEach((s) => { s.hidden = s.id !== `tab-${tab}`; });
  document.querySelectorAll("nav a[data-tab]").forEach((a) => a.classList.toggle("active", a.dataset.tab === tab));
  if (tab === "job" && arg) { $("#jobtab").hidden = false; $("#jobtab").href = `#job=${encodeURIComponent(arg)}`; loadJob(arg); }
  render();
}
window.addEventListener("hashchange", route);
$("#jobsearch").addEventListener("submit", (e) => { e.preventDefault(); const n = $("#jobname").value.trim(); if (n) location.hash = `job=${encodeURIComponent(n)}`; });
document.addEventListener("click", (e) => {
  const a = e.target.closest("[data-job]");
  if (a) { e.preventDefault(); location.hash = `job=${encodeURIComponent(a.dataset.job)}`; }
});
const jobLink = (name) => name ? `<a class="job" data-job="${esc(name)}" href="#job=${encodeURIComponent(name)}">${esc(name)}</a>` : "";
const teamDot = (team) => `<span class="teamdot" style="background:${esc(VIEW?.map.teams[team] || "#888")}"></span>`;

// --- the live connection -----------------------------------------------------------------------

async function loadAll() {
  const [view, stream] = await Promise.all([fetch("/api/view").then((r) => r.json()), fetch("/api/stream?limit=300").then((r) => r.json())]);
  VIEW = view; STREAM = stream;
  route();
  connect();
}

function connect() {
  const live = $("#live");
  const source = new EventSource("/api/live");
  source.addEventListener("open", () => { live.className = "live on"; live.querySelector("span").textContent = "live"; });
  source.addEventListener("error", () => { live.className = "live off"; live.querySelector("span").textContent = "reconnecting…"; });
  source.addEventListener("view", (e) => {
    const msg = JSON.parse(e.data);
    VIEW = msg.view;
    const known = new Set(STREAM.map((x) => x.offset));
    const fresh = msg.events.filter((x) => !known.has(x.offset)).reverse();
    STREAM = fresh.concat(STREAM).slice(0, 2000);
    render();
    // the job page asks again when an event is about the job, and now and then for its forecast
    const about = (x) => JOB && (x.job === JOB.workload || x.preemptor === JOB.workload || x.victim === JOB.workload);
    if (JOB && !$("#tab-job").hidden && (fresh.some(about) || Date.now() - jobLoaded > 10_000)) loadJob(JOB.workload, true);
  });
}

function render() {
  if (!VIEW) return;
  renderSummary();
  const tab = document.querySelector("nav a.active")?.dataset.tab || "map";
  if (tab === "map") renderMap($("#map"), VIEW.map, null);
  if (tab === "queues") renderQueues();
  if (tab === "decisions") renderStream();
  if (tab === "money") renderMoney();
  if (tab === "job" && JOB) renderJob();
}

function renderSummary() {
  const s = VIEW.summary;
  $("#summary").innerHTML = `cluster time <b>${esc(day(s.time_ms))}</b> · <b>${s.offset + 1}</b>${s.end != null ? ` of ${s.end}` : ""} log events folded`
    + ` · <b>${s.active}</b> holding quota · <b>${s.pending}</b> pending · <b>${s.decisions}</b> decisions (${s.superseded} superseded)`
    + (s.contract ? ` · contract ${esc(s.contract)}` : " · no contract yet")
    + (s.problem ? `<div class="problem">${esc(s.problem)}</div>` : "");
  $("#services").innerHTML = (s.services || []).map((x) => {
    const cls = x.lag == null ? "unknown" : (x.lag > 0 ? "lag" : "");
    const what = x.lag == null ? "?" : (x.lag > 0 ? `lag ${x.lag}` : "caught up");
    return `<span class="${cls}" title="folded up to offset ${x.folded ?? "?"}">${esc(x.service)}: ${what}</span>`;
  }).join("");
}

// --- the GPU map -------------------------------------------------------------------------------

function gpuCell(node, g, teams, mine) {
  const held = g.holders;
  const names = [...new Set(held.map((h) => h.workload))];
  let style = "", text = "", cls = `gpu ${g.status}`;
  if (g.status === "unavailable") text = "×";
  else if (held.length) {
    const used = held.reduce((a, h) => a + h.milli, 0);
    const colour = teams[held[0].team] || "#888";
    if (used >= 1000 && new Set(held.map((h) => h.team)).size === 1) style = `background:${colour}`;
    else {
      // a shared GPU: each holder's part in its team's colour, the free rest idle
      let at = 0; const stops = [];
      for (const h of held) { const c = teams[h.team] || "#888"; const to = at + h.milli / 10; stops.push(`${c} ${at}% ${to}%`); at = to; }
      stops.push(`var(--idle) ${at}% 100%`);
      style = `background:linear-gradient(to top, ${stops.join(", ")})`;
      text = `<span class="frac">${gpuText(used)}</span>`;
    }
    if (held.some((h) => h.phase === "evicting")) cls += " leaving";
  }
  if (mine && names.includes(mine)) cls += " mine";
  const team = held.length ? held[0].team : "";
  return `<div class="${cls}" style="${style}" data-node="${esc(node.name)}" data-gpu="${g.i}" data-status="${g.status}"`
    + ` data-team="${esc(team)}" data-workload="${esc(names.join(","))}"${names.length ? ` data-job="${esc(names[0])}"` : ""}>${text}</div>`;
}

function renderMap(el, map, mine) {
  const teams = map.teams;
  const key = JSON.stringify([map, mine]);
  if (el._key === key) return;  // unchanged: keep the DOM (hover and selection stay put)
  el._key = key;
  if (el.id === "map") {
    $("#legend").innerHTML = Object.entries(teams).map(([t, c]) => `<span><i class="sw" style="background:${c}"></i>${esc(t)}</span>`).join("")
      + `<span><i class="sw" style="background:var(--idle)"></i>idle</span>`
      + `<span><i class="sw" style="background:repeating-linear-gradient(45deg,#475467 0 4px,#98a2b3 4px 8px)"></i>unavailable</span>`
      + `<span><i class="sw" style="background:linear-gradient(to top,#0072B2 50%,var(--idle) 50%)"></i>shared (fraction in use)</span>`
      + `<span><i class="sw" style="outline:2px dashed #b42318;outline-offset:-3px"></i>being preempted</span>`
      + `<span class="muted">NVLink islands are outlined</span>`;
  }
  if (!map.blocks.length) { el.innerHTML = `<p class="muted">No nodes on the log yet.</p>`; return; }
  el.classList.toggle("focus", !!mine);
  el.innerHTML = map.blocks.map((b) => `<div class="block"><div class="title">${esc(levelName("block", b.name))}</div><div class="racks">`
    + b.racks.map((r) => `<div class="rack"><div class="title">${esc(levelName("rack", r.name))}</div><div class="nodes">`
      + r.nodes.map((n) => nodeCard(n, teams, mine)).join("") + `</div></div>`).join("") + `</div></div>`).join("");
}

function nodeCard(n, teams, mine) {
  const groups = n.islands.length ? n.islands : [[0, n.gpus.length]];
  const byIsland = groups.map(([a, b]) => n.gpus.filter((g) => g.i >= a && g.i < b));
  const extra = n.gpus.filter((g) => g.i >= (groups.length ? groups[groups.length - 1][1] : 0));
  if (extra.length) byIsland.push(extra);
  const islands = byIsland.map((gs, k) => `<div class="island${n.islands.length && k < n.islands.length ? "" : " pcie"}"`
    + ` title="${n.islands.length && k < n.islands.length ? "NVLink island" : "no NVLink"}">${gs.map((g) => gpuCell(n, g, teams, mine)).join("")}</div>`).join("");
  return `<div class="node${n.removed ? " removed" : ""}" data-node="${esc(n.name)}"><div class="name">${esc(n.name)}`
    + `<small>${n.removed ? "removed" : `${n.gpus_free}/${n.gpus_total} idle`}</small></div><div class="gpus">${islands}</div></div>`;
}

// the hover card of a GPU: who holds it
document.addEventListener("mouseover", (e) => {
  const cell = e.target.closest(".gpu");
  const tip = $("#tip");
  if (!cell || !VIEW) { tip.hidden = true; return; }
  const node = findNode(cell.dataset.node);
  const g = node?.gpus.find((x) => String(x.i) === cell.dataset.gpu);
  if (!g) { tip.hidden = true; return; }
  let html = `<b>${esc(node.name)}</b> GPU ${g.i}: `;
  if (g.status === "unavailable") html += esc(g.why);
  else if (!g.holders.length) html += "idle";
  else html += g.holders.map((h) => `<div>${esc(h.workload)} (${esc(h.team)}, ${esc(h.phase)}) pod ${esc(h.pod)} · ${gpuText(h.milli)} GPU</div>`).join("")
    + (g.free ? `<div>${gpuText(g.free)} GPU free</div>` : "");
  tip.innerHTML = html; tip.hidden = false;
  const r = cell.getBoundingClientRect();
  tip.style.left = `${Math.min(r.right + 8, innerWidth - 370)}px`; tip.style.top = `${r.top}px`;
});
function findNode(name) {
  for (const b of VIEW.map.blocks) for (const r of b.racks) for (const n of r.nodes) if (n.name === name) return n;
  return null;
}

// --- queues ------------------------------------------------------------------------------------

let queuesKey = null;
function renderQueues() {
  const q = VIEW.queues;
  const key = JSON.stringify([q, VIEW.map.teams]);
  if (key === queuesKey) return;
  queuesKey = key;
  // one bar per ClusterQueue, then one per cohort (its members' use against the quota they pool)
  const gpuRows = q.cluster_queues.filter((r) => r.resource === "nvidia.com/gpu").concat(
    q.cohorts.filter((c) => c.resource === "nvidia.com/gpu").map((c) => ({cluster_queue: `cohort ${c.cohort}`, flavor: c.flavor,
      nominal: c.nominal, used: Math.min(c.used, c.nominal), borrowed: 0, lent: 0})));
  const labels = gpuRows.map((r) => `${r.cluster_queue} (${r.flavor})`);
  const g = (v) => v / 1000;
  const data = {
    labels,
    datasets: [
      {label: "used (within guarantee)", data: gpuRows.map((r) => g(Math.min(r.used, r.nominal))), backgroundColor: "#0b5cad"},
      {label: "borrowed", data: gpuRows.map((r) => g(r.borrowed)), backgroundColor: "#fca311"},
      {label: "lent to the cohort", data: gpuRows.map((r) => g(r.lent)), backgroundColor: "#9e77ed"},
      {label: "guaranteed, idle", data: gpuRows.map((r) => g(Math.max(0, r.nominal - Math.min(r.used, r.nominal) - r.lent))), backgroundColor: "#d0d5dd"},
    ],
  };
  chart("quota-chart", {type: "bar", data, options: {indexAxis: "y", animation: false, maintainAspectRatio: false,
    scales: {x: {stacked: true, title: {display: true, text: "GPUs"}}, y: {stacked: true}}, plugins: {legend: {position: "bottom"}}}});
  const lim = (v, r) => v == null ? "—" : qty(v, r);
  $("#quota-table").innerHTML = `<tr><th>ClusterQueue</th><th>cohort</th><th>flavor</th><th>resource</th><th>guaranteed</th><th>used</th><th>borrowed</th><th>lent</th><th>borrowing limit</th><th>lending limit</th></tr>`
    + q.cluster_queues.map((r) => `<tr data-cq="${esc(r.cluster_queue)}"><td>${esc(r.cluster_queue)}</td><td>${esc(r.cohort)}</td><td>${esc(r.flavor)}</td><td>${esc(r.resource)}</td>`
      + `<td class="num">${qty(r.nominal, r.resource)}</td><td class="num">${qty(r.used, r.resource)}</td><td class="num">${qty(r.borrowed, r.resource)}</td><td class="num">${qty(r.lent, r.resource)}</td>`
      + `<td class="num">${lim(r.borrowing_limit, r.resource)}</td><td class="num">${lim(r.lending_limit, r.resource)}</td></tr>`).join("");
  $("#cohort-table").innerHTML = `<tr><th>cohort</th><th>members</th><th>flavor</th><th>resource</th><th>quota (members + own)</th><th>used</th><th>borrowed by members</th></tr>`
    + q.cohorts.map((c) => `<tr><td>${esc(c.cohort)}</td><td>${esc(c.members.join(", "))}</td><td>${esc(c.flavor)}</td><td>${esc(c.resource)}</td>`
      + `<td class="num">${qty(c.nominal, c.resource)}</td><td class="num">${qty(c.used, c.resource)}</td><td class="num">${qty(c.borrowed, c.resource)}</td></tr>`).join("");
  const now = VIEW.summary.time_ms;
  $("#pending-table").innerHTML = `<tr><th>ClusterQueue</th><th>position</th><th>workload</th><th>GPUs</th><th>priority</th><th>why it waits</th><th>estimated start</th></tr>`
    + (q.pending.length ? q.pending.map((p) => `<tr data-workload="${esc(p.workload)}"><td>${esc(p.cluster_queue)}</td><td class="num">${p.cq_position} <span class="muted">(LQ ${p.lq_position})</span></td>`
      + `<td>${teamDot(p.team)}${jobLink(p.workload)}</td><td class="num">${p.gpus}</td><td class="num">${p.priority}</td>`
      + `<td class="reason"><span class="code">${esc(p.code)}</span>${esc(p.reason)}</td><td title="${esc(p.start || day(p.eta_ms))}">${esc(p.eta_ms == null && p.start ? p.start : rel(p.eta_ms, now))}</td></tr>`).join("")
      : `<tr><td colspan="7" class="muted">Nothing is waiting.</td></tr>`)
    + (q.pending_total > q.pending.length ? `<tr><td colspan="7" class="muted">… and ${q.pending_total - q.pending.length} more (the first ${q.pending.length} in queue order shown)</td></tr>` : "");
}

function chart(id, config) {
  if (typeof Chart === "undefined") return;
  if (charts[id]) { charts[id].data = config.data; charts[id].options = config.options; charts[id].update("none"); return; }
  charts[id] = new Chart(document.getElementById(id), config);
}

// --- the decision stream ------------------------------------------------------------------------

let streamKey = null;
function renderStream() {
  const fill = (sel, values) => {
    const el = $(sel), cur = el.value;
    const want = ["", ...values];
    if ([...el.options].map((o) => o.value).join("|") !== want.join("|"))
      el.innerHTML = want.map((v) => `<option value="${esc(v)}">${v ? esc(v) : "all"}</option>`).join("");
    el.value = want.includes(cur) ? cur : "";
  };
  fill("#f-team", Object.keys(VIEW.map.teams));
  fill("#f-kind", [...new Set(STREAM.map((x) => x.kind))].sort());
  const team = $("#f-team").value, kind = $("#f-kind").value, job = $("#f-job").value.trim();
  const key = `${STREAM.length ? STREAM[0].offset : -1}|${team}|${kind}|${job}`;
  if (key === streamKey) return;
  streamKey = key;
  const rows = STREAM.filter((x) => (!team || x.team === team || (x.preemptor || "").startsWith(team + "/"))
    && (!kind || x.kind === kind) && (!job || x.job.includes(job) || (x.preemptor || "").includes(job))).slice(0, 500);
  $("#stream-count").textContent = `${rows.length} of the latest ${STREAM.length} events`;
  $("#stream").innerHTML = `<tr><th>offset</th><th>cluster time</th><th>kind</th><th>job</th><th>what happened</th></tr>`
    + rows.map((x) => `<tr data-kind="${esc(x.kind)}" data-team="${esc(x.team)}"><td class="num">${x.offset}</td><td>${clock(x.time_ms)}</td>`
      + `<td class="kind"><span class="kindtag ${esc(x.kind)}">${esc(x.kind)}</span></td><td>${x.team ? teamDot(x.team) : ""}${jobLink(x.job)}</td><td>${esc(x.text)}</td></tr>`).join("");
}
["#f-team", "#f-kind"].forEach((s) => $(s).addEventListener("change", renderStream));
$("#f-job").addEventListener("input", renderStream);

// --- money ------------------------------------------------------------------------------------

let moneyKey = null;
function renderMoney() {
  const m = VIEW.money;
  const key = JSON.stringify(m);
  if (key === moneyKey) return;
  moneyKey = key;
  const priced = !!m.currency;
  $("#money-note").textContent = `from the folded log (placement to end)${priced ? `; spend at the contract's prices in ${m.currency}` : "; the contract sets no prices"}`;
  const labels = m.times_ms.map((t) => clock(t));
  // with prices, the chart is spend per team over time; without, allocated GPU-hours
  $("#money-title").textContent = priced ? `Spend per team over time (${m.currency})` : "GPU-hours allocated per team over time";
  chart("money-chart", {type: "line", data: {labels, datasets: m.teams.map((t) => ({label: t.team, data: priced ? t.spend_series : t.series,
    borderColor: t.colour, backgroundColor: t.colour, tension: 0.2, pointRadius: 0}))}, options: {animation: false, maintainAspectRatio: false,
    scales: {y: {title: {display: true, text: priced ? `${m.currency} (cumulative)` : "GPU-hours (cumulative)"}}, x: {title: {display: true, text: "cluster time (UTC)"}, ticks: {maxTicksLimit: 12, maxRotation: 0}}}}});
  chart("busy-chart", {type: "bar", data: {labels: m.teams.map((t) => t.team), datasets: [
    {label: "allocated", data: m.teams.map((t) => t.allocated_gpu_hours), backgroundColor: m.teams.map((t) => t.colour)},
    {label: "busy (pods running)", data: m.teams.map((t) => t.busy_gpu_hours), backgroundColor: "#98a2b3"}]},
    options: {animation: false, maintainAspectRatio: false, indexAxis: "y", plugins: {legend: {position: "bottom"}}}});
  $("#money-table").innerHTML = `<tr><th>team</th><th>allocated GPU-hours</th><th>busy GPU-hours</th><th>idle while allocated</th>${priced ? `<th>spend (${esc(m.currency)})</th>` : ""}</tr>`
    + m.teams.map((t) => `<tr data-team="${esc(t.team)}"><td>${teamDot(t.team)}${esc(t.team)}</td><td class="num">${t.allocated_gpu_hours.toFixed(2)}</td>`
      + `<td class="num">${t.busy_gpu_hours.toFixed(2)}</td><td class="num">${(t.allocated_gpu_hours - t.busy_gpu_hours).toFixed(2)}</td>`
      + (priced ? `<td class="num">${t.spend.toFixed(2)}</td>` : "") + `</tr>`).join("");
}

// --- a job ------------------------------------------------------------------------------------

async function loadJob(name, quiet) {
  const r = await fetch(`/api/job?name=${encodeURIComponent(name)}`);
  if (!r.ok) {
    JOB = null;
    if (!quiet) { $("#job-head").innerHTML = `<h1>${esc(name)}</h1><span class="muted">not on the log</span>`; $("#timeline").innerHTML = ""; $("#explain").textContent = ""; $("#job-map").innerHTML = ""; }
    return;
  }
  JOB = await r.json();
  jobLoaded = Date.now();
  renderJob();
}

let jobKey = null;
function renderJob() {
  const j = JOB;
  if (j.pods.length && VIEW) renderMap($("#job-map"), VIEW.map, j.workload);
  const key = JSON.stringify(j);
  if (key === jobKey) return;
  jobKey = key;
  $("#job-head").innerHTML = `<h1>${teamDot(j.team)}${esc(j.workload)}</h1><span class="phase" data-phase="${esc(j.phase)}">${esc(j.phase)}</span>`
    + `<span>team <b>${esc(j.team)}</b></span><span>ClusterQueue <b>${esc(j.cluster_queue)}</b></span><span>${j.gpus} GPUs</span>`
    + `<span>priority ${j.priority}</span><span>attempt ${j.attempt + 1}</span>`;
  $("#timeline").innerHTML = j.timeline.map((s) => {
    let detail = esc(s.text);
    if (s.step === "preempted") detail = `<div class="detail preemption">preempted by ${jobLink(s.preemptor)}<br>rule: ${esc(s.rule)}<br>`
      + `grace period ${s.grace_s} s · work lost ${s.work_lost_s} s</div>`;
    if (s.step === "made room") detail = `ordered ${jobLink(s.victim)} out: ${esc(s.rule)}`;
    return `<li class="${esc(s.step.replace(" ", "-"))}" data-step="${esc(s.step)}"><span class="step">${esc(s.step)}</span>`
      + `<span class="when">[${s.offset}] ${clock(s.time_ms)}</span><div>${detail}</div></li>`;
  }).join("");
  $("#explain").textContent = j.explain.join("\n");
  if (!j.pods.length) { $("#job-map")._key = null; $("#job-map").innerHTML = `<p class="muted">${esc(j.workload)} holds no GPUs now (${esc(j.phase)}).</p>`; }
}

loadAll();
