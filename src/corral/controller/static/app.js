// corral dashboard: plain JavaScript, no build step. Reads the controller's API with a personal or
// the admin token kept in this tab's sessionStorage, and stays live through /api/v1/events (server-sent
// events read with fetch, so the token travels in a header, never in a URL).
"use strict";

const API = "/api/v1";
const TERMINAL = new Set(["SUCCEEDED", "FAILED", "CANCELLED", "UNSCHEDULABLE", "LOST", "KILLED", "WORKER_FAILED",
  "PREEMPTED"]);
const JOB_STATES = ["PENDING", "SCHEDULED", "PREPARING", "PREPARED", "STARTING", "RUNNING", "DRAINING", "TERMINATING",
  "SUCCEEDED", "FAILED", "CANCELLED", "UNSCHEDULABLE", "LOST"];
const PAGE_SIZE = 50;
const $ = (selector) => document.querySelector(selector);

// ---- small helpers ---------------------------------------------------------------------------

/** An element: h("a", {href: "#/"}, "text", child). Text is always text, never parsed as HTML. */
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else if (key === "class") el.className = value;
    else el.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** Replaces an element's children, skipping empty ones (null, false). */
function fill(el, ...children) {
  el.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

function badge(state) {
  const name = String(state || "unknown");
  return h("span", {class: `badge s-${name.toLowerCase()}`}, name.toLowerCase());
}

function age(seconds) {
  if (seconds === null || seconds === undefined) return "-";
  const s = Math.max(0, seconds);
  if (s < 60) return `${Math.floor(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h${String(Math.floor(s % 3600 / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86400)}d${Math.floor(s % 86400 / 3600)}h`;
}
const since = (at) => (at ? age(Date.now() / 1000 - at) : "-");
const clock = (at) => (at ? new Date(at * 1000).toLocaleTimeString([], {hour12: false}) : "-");
const stamp = (at) => (at ? new Date(at * 1000).toLocaleString([], {hour12: false}) : "-");

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(n) || 0, i = 0;
  while (value >= 1024 && i < units.length - 1) { value /= 1024; i++; }
  return `${value >= 10 || i === 0 ? value.toFixed(0) : value.toFixed(1)} ${units[i]}`;
}
const amount = (resource, n) => (resource === "memory" ? bytes(n)
  : String(resource === "gpu" ? Math.round(n * 100) / 100 : Math.round(n * 10) / 10));  // GPU shares in hundredths

function taskSummary(counts) {
  const entries = Object.entries(counts || {}).sort((a, b) => b[1] - a[1]);
  return entries.map(([state, n]) => `${n} ${state.toLowerCase()}`).join(", ") || "-";
}

/** Calls `fn` at most once per `ms`, and once more after the last call. */
function throttle(fn, ms) {
  let timer = null, pending = false;
  return () => {
    if (timer) { pending = true; return; }
    fn();
    timer = setTimeout(function again() {
      timer = null;
      if (pending) { pending = false; fn(); timer = setTimeout(again, ms); }
    }, ms);
  };
}

// ---- the API and the token -------------------------------------------------------------------

const token = {
  get: () => sessionStorage.getItem("corral-token"),
  set: (value) => sessionStorage.setItem("corral-token", value),
  clear: () => sessionStorage.removeItem("corral-token"),
};

class Unauthorized extends Error {}

async function api(path, options = {}) {
  const response = await fetch(API + path, {
    ...options, headers: {...(options.headers || {}), Authorization: `Bearer ${token.get()}`},
  });
  if (response.status === 401) throw new Unauthorized("the token was refused");
  if (!response.ok) {
    let detail = response.statusText;
    try { detail = (await response.json()).detail || detail; } catch (_) { /* not JSON */ }
    throw new Error(typeof detail === "string" ? detail : JSON.stringify(detail));
  }
  return response;
}
const getJSON = async (path) => (await api(path)).json();

// ---- the event stream ------------------------------------------------------------------------

/**
 * The text/event-stream format, as the WHATWG HTML standard ("Server-sent events") reads it, the same rules
 * as corral.client.sse.EventParser: lines end with CRLF, LF or CR; a line starting with ":" is a comment;
 * "data" lines are joined with newlines, and an event without data is not dispatched; "event" names the type
 * of this event only; "id" sets the id of this event and those after it (ignored if it holds NUL), and
 * `lastId` is the id of the last event dispatched, so a stream dropped mid-event resumes before that event;
 * "retry" with only digits sets the reconnection delay (ms); one space after the colon is dropped.
 */
class EventStreamParser {
  constructor(lastId = null) {
    this.lastId = lastId; this.retry = null;
    this.id = lastId; this.type = ""; this.data = []; this.buffer = ""; this.started = false; this.afterCR = false;
  }

  /** Feeds decoded text; returns the events it completes, each {id, type, data}. */
  push(text) {
    if (!text) return [];
    if (this.afterCR && text.startsWith("\n")) text = text.slice(1); // the CR that ended the last chunk was a CRLF
    this.buffer += text;
    if (!this.started && this.buffer) { this.buffer = this.buffer.replace(/^\uFEFF/, ""); this.started = true; }
    this.afterCR = this.buffer.endsWith("\r");
    const events = [];
    const lineEnd = /\r\n|\n|\r/g;
    let start = 0, match;
    while ((match = lineEnd.exec(this.buffer)) !== null) {
      const event = this.line(this.buffer.slice(start, match.index));
      start = lineEnd.lastIndex;
      if (event) events.push(event);
    }
    this.buffer = this.buffer.slice(start);
    return events;
  }

  line(line) {
    if (line === "") return this.dispatch();
    if (line.startsWith(":")) return null;
    const colon = line.indexOf(":");
    const name = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "data") this.data.push(value);
    else if (name === "event") this.type = value;
    else if (name === "id" && !value.includes("\0")) this.id = value;
    else if (name === "retry" && /^[0-9]+$/.test(value)) this.retry = Number(value);
    return null;
  }

  dispatch() {
    this.lastId = this.id;
    const event = this.data.length ? {id: this.lastId, type: this.type || "message", data: this.data.join("\n")} : null;
    this.type = ""; this.data = [];
    return event;
  }
}

/**
 * Follows /events; a dropped stream is resumed after the last id seen (Last-Event-ID, and `after` for proxies
 * that drop the header), after the server's `retry:` delay, so nothing in between is missed.
 */
const stream = {
  lastId: null, retryMs: 2000, controller: null, listeners: new Set(),

  start() {
    this.stop();
    this.controller = new AbortController();
    this.run(this.controller.signal);
  },
  stop() { if (this.controller) this.controller.abort(); this.controller = null; },

  async run(signal) {
    while (!signal.aborted) {
      const parser = new EventStreamParser(this.lastId); // what a dropped stream left half-sent is discarded
      try {
        const headers = {Authorization: `Bearer ${token.get()}`, Accept: "text/event-stream"};
        let query = "?last=1";
        if (this.lastId !== null) {
          headers["Last-Event-ID"] = this.lastId;
          query = /^[0-9]+$/.test(this.lastId) ? `?after=${this.lastId}` : "";
        }
        const response = await fetch(`${API}/events${query}`, {headers, signal});
        if (response.status === 401) { signOut(); return; }
        if (!response.ok) throw new Error(`events: HTTP ${response.status}`);
        setLive(true);
        await this.read(response.body.getReader(), parser, signal);
      } catch (error) {
        if (signal.aborted) return;
      }
      this.lastId = parser.lastId;
      if (parser.retry !== null) this.retryMs = parser.retry;
      setLive(false);
      await new Promise((resolve) => setTimeout(resolve, this.retryMs));
    }
  },

  async read(reader, parser, signal) {
    const decoder = new TextDecoder();
    while (!signal.aborted) {
      const {value, done} = await reader.read();
      if (done) return;
      for (const {data} of parser.push(decoder.decode(value, {stream: true}))) {
        let event;
        try { event = JSON.parse(data); } catch { continue; } // not one of the controller's events
        for (const listener of this.listeners) listener(event);
      }
    }
  },
};

function setLive(on) {
  const el = $("#live");
  el.textContent = on ? "live" : "reconnecting";
  el.classList.toggle("on", on);
}

// ---- routing ---------------------------------------------------------------------------------

let current = null; // {stop()} of the view on screen

function route() {
  if (!token.get()) { showLogin(); return; }
  const [path, query] = location.hash.slice(1).split("?");
  const params = new URLSearchParams(query || "");
  const parts = (path || "/").split("/").filter(Boolean);
  const view = $("#view");
  if (current) current.stop();
  stream.listeners.clear();
  fill(view);
  let name = "overview";
  if (parts[0] === "jobs" && parts[1]) { name = "jobs"; current = jobView(view, Number(parts[1])); }
  else if (parts[0] === "jobs") { name = "jobs"; current = jobsView(view, params); }
  else if (parts[0] === "queue") { name = "queue"; current = queueView(view, params); }
  else if (parts[0] === "workers") { name = "workers"; current = workersView(view); }
  else if (parts[0] === "deployments") { name = "deployments"; current = deploymentsView(view); }
  else if (parts[0] === "usage") { name = "usage"; current = usageView(view, params); }  // static/usage.js
  else current = overviewView(view);
  for (const link of document.querySelectorAll("[data-nav]")) {
    if (link.dataset.nav === name) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

/** A view that re-reads on relevant events (throttled) and on a timer; shows errors in place. */
function liveView(container, load, {relevant = () => true, every = 10000, throttleMs = 400} = {}) {
  let stopped = false;
  const refresh = throttle(async () => {
    if (stopped) return;
    try { await load(); } catch (error) { handleError(error, container); }
  }, throttleMs);
  const listener = (event) => { if (relevant(event)) refresh(); };
  stream.listeners.add(listener);
  const timer = setInterval(refresh, every);
  refresh();
  return {stop() { stopped = true; clearInterval(timer); stream.listeners.delete(listener); }, refresh};
}

function handleError(error, container) {
  if (error instanceof Unauthorized) { signOut("The token was refused; sign in again."); return; }
  fill(container, h("p", {class: "error", role: "alert"}, `Could not load: ${error.message}`));
}

// ---- overview --------------------------------------------------------------------------------

function overviewView(view) {
  const body = h("div");
  view.append(h("h1", {}, "Overview"), body);
  return liveView(body, async () => {
    const [{summary, samples}, served, controllers] = await Promise.all([getJSON("/overview"),
      getJSON("/overview/deployments?events=0"), getJSON("/controllers")]);
    const cap = h("section", {class: "card", "aria-labelledby": "cap-title"}, h("h2", {id: "cap-title"}, "Capacity and use"));
    if (!summary.pools.length) cap.append(h("p", {class: "muted"}, "No worker is alive."));
    for (const pool of summary.pools) {
      cap.append(h("h3", {class: "muted"}, `pool ${pool.pool} · ${pool.workers} worker(s)`));
      for (const resource of ["cpu", "gpu", "memory"]) cap.append(useBar(resource, pool.used[resource], pool.capacity[resource]));
    }
    const queue = h("section", {class: "card", "aria-labelledby": "queue-title"}, h("h2", {id: "queue-title"}, "Queue"));
    const waiting = summary.queue.reduce((n, q) => n + q.jobs, 0);
    queue.append(h("p", {}, h("span", {class: "big"}, waiting), " job(s) waiting to be placed"));
    if (summary.queue.length) {
      queue.append(h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "pool"), h("th", {class: "num"}, "jobs"),
        h("th", {class: "num"}, "tasks"), h("th", {class: "num"}, "oldest"))),
      h("tbody", {}, summary.queue.map((q) => h("tr", {}, h("td", {}, q.pool), h("td", {class: "num"}, q.jobs),
        h("td", {class: "num"}, q.tasks), h("td", {class: "num"}, age(q.oldest_seconds)))))));
    }
    queue.append(h("p", {}, h("a", {href: "#/queue"}, "See the queue in order")));
    const counts = h("section", {class: "card", "aria-labelledby": "counts-title"}, h("h2", {id: "counts-title"}, "Jobs and workers"),
      h("h3", {class: "muted"}, "jobs by state"), countList(summary.jobs, (state) => `#/jobs?state=${state}`),
      h("h3", {class: "muted"}, "workers by state"), countList(summary.workers, () => "#/workers"));
    const charts = h("section", {class: "card", "aria-labelledby": "charts-title"}, h("h2", {id: "charts-title"}, "The last hour"),
      chart("CPU in use (cores)", samples, (s) => s.used.cpu, "var(--running)"),
      chart("GPUs in use", samples, (s) => s.used.gpu, "var(--building)"),
      chart("Jobs waiting", samples, (s) => s.queued_jobs, "var(--pending)"));
    fill(body, h("div", {class: "grid"}, cap, queue, counts, servingCard(served.summary), controllersCard(controllers)),
      h("div", {class: "grid"}, charts));
  }, {relevant: () => true, throttleMs: 1000});
}

function servingCard(summary) {
  const total = Object.values(summary.deployments).reduce((n, k) => n + k, 0);
  return h("section", {class: "card", "aria-labelledby": "serving-title"}, h("h2", {id: "serving-title"}, "Deployments"),
    h("p", {}, h("span", {class: "big"}, total), " deployment(s) · ",
      h("span", {class: summary.ready < summary.wanted ? "health bad" : "health ok", "data-ready": ""},
        `${summary.ready} of ${summary.wanted} replicas ready`),
      summary.unhealthy ? h("span", {class: "health bad"}, ` · ${summary.unhealthy} failing health checks`) : null),
    countList(summary.deployments, () => "#/deployments"),
    summary.degraded.length ? h("p", {class: "reason"}, `short of replicas: ${summary.degraded.join(", ")}`) : null,
    h("p", {}, h("a", {href: "#/deployments"}, "See the deployments")));
}

// The controllers serving the store (several may share one PostgreSQL store): live or gone, and their last pass.
function controllersCard(controllers) {
  return h("section", {class: "card", "aria-labelledby": "controllers-title"}, h("h2", {id: "controllers-title"}, "Controllers"),
    h("table", {"aria-label": "controllers"}, h("thead", {}, h("tr", {}, h("th", {}, "url"), h("th", {}, "state"),
      h("th", {class: "num"}, "last pass"))),
    h("tbody", {}, controllers.map((c) => h("tr", {"data-controller": c.id},
      h("td", {}, c.url + (c.this ? " (this)" : "")),
      h("td", {class: c.state === "live" ? "health ok" : "health bad"}, c.state),
      h("td", {class: "num"}, c.last_pass_at ? `${since(c.last_pass_at)} ago` : "-"))))));
}

function useBar(resource, used, capacity) {
  const share = capacity > 0 ? used / capacity : 0;
  const label = `${resource}: ${amount(resource, used)} of ${amount(resource, capacity)} in use`;
  return h("div", {class: "bar"}, h("span", {}, resource),
    h("div", {class: "track", role: "meter", "aria-label": label, "aria-valuemin": 0, "aria-valuemax": capacity,
      "aria-valuenow": used},
    h("div", {class: `fill${share > 0.9 ? " high" : ""}`, style: `width:${Math.min(100, share * 100).toFixed(1)}%`})),
    h("span", {class: "num"}, `${amount(resource, used)} / ${amount(resource, capacity)}`));
}

/** One GPU: a segment per task holding it (its share, or all of it), and NVML's last reading of its memory. */
function deviceBar(device) {
  const booked = Math.round(device.booked * 100) / 100;
  const read = device.memory_used == null ? "not read"
    : `${bytes(device.memory_used)} of ${bytes(device.memory)} used${device.utilization == null ? "" : `, ${device.utilization}% busy`}`;
  const label = `gpu ${device.index}${device.model ? ` (${device.model})` : ""}: ${booked} of 1 booked; ${read}`;
  return h("div", {class: "bar device", "data-device": device.index},
    h("span", {title: device.model || ""}, `gpu ${device.index}`),
    h("div", {class: "track", role: "meter", "aria-label": label, "aria-valuemin": 0, "aria-valuemax": 1, "aria-valuenow": booked},
      device.tasks.map((t) => h("a", {class: `fill${t.share < 1 ? " share" : ""}`, href: `#/jobs/${t.job_id}`,
        title: `job ${t.job_id} task ${t.index}: ${t.share < 1 ? `a share of ${t.share}` : "the whole device"}`,
        style: `width:${(t.share * 100).toFixed(1)}%`}))),
    h("span", {class: "num"}, device.memory_used == null ? `${booked} / 1` : `${booked} / 1 · ${bytes(device.memory_used)}`));
}

function countList(counts, link) {
  const entries = Object.entries(counts || {});
  if (!entries.length) return h("p", {class: "muted"}, "none");
  return h("ul", {class: "counts"}, entries.map(([state, n]) => h("li", {}, h("a", {href: link(state)}, badge(state), ` ${n}`))));
}

/** A line chart of one value over the samples, as inline SVG with a text summary. */
function chart(title, samples, value, colour) {
  const width = 600, height = 120, pad = 4;
  const values = samples.map(value);
  const peak = Math.max(0, ...values), scale = Math.max(1, peak);  // the scale only: a line of zeros on the axis
  const t0 = samples.length ? samples[0].at : 0, t1 = samples.length ? samples[samples.length - 1].at : 1;
  const x = (t) => pad + (width - 2 * pad) * (t1 > t0 ? (t - t0) / (t1 - t0) : 1);
  const y = (v) => height - pad - (height - 2 * pad) * (v / scale);
  const points = samples.map((s, i) => `${x(s.at).toFixed(1)},${y(values[i]).toFixed(1)}`).join(" ");
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  const now = values.length ? values[values.length - 1] : 0;
  svg.setAttribute("aria-label", `${title}: now ${now}, peak ${peak} over ${samples.length} samples`);
  const axis = document.createElementNS(ns, "line");
  for (const [k, v] of Object.entries({x1: 0, x2: width, y1: height - pad, y2: height - pad, class: "axis"})) axis.setAttribute(k, v);
  const line = document.createElementNS(ns, "polyline");
  line.setAttribute("points", points);
  line.setAttribute("class", "line");
  line.setAttribute("stroke", colour);
  svg.append(axis, line);
  return h("figure", {class: "chart"}, h("figcaption", {}, `${title} · now ${Math.round(now * 10) / 10}, peak ${Math.round(peak * 10) / 10}`), svg);
}

// ---- jobs ------------------------------------------------------------------------------------

const SORTABLE = {id: "ID", name: "Name", state: "State", priority: "Priority", created_at: "Created"};

function jobsView(view, params) {
  const state = params.get("state") || "", name = params.get("name") || "", project = params.get("project") || "";
  const pool = params.get("pool") || "", sort = params.get("sort") || "id", order = params.get("order") || "desc";
  const owner = params.get("owner") || "", page = Math.max(0, Number(params.get("page") || 0));
  const go = (changes) => {
    const next = new URLSearchParams({state, name, owner, project, pool, sort, order, page: String(page), ...changes});
    for (const [k, v] of [...next.entries()]) if (!v || (k === "page" && v === "0")) next.delete(k);
    location.hash = `#/jobs?${next}`;
  };
  const form = h("form", {class: "filters", role: "search", onsubmit: (e) => {
    e.preventDefault();
    const data = new FormData(e.target);
    go({state: data.get("state"), name: data.get("name").trim(), owner: data.get("owner").trim(),
      project: data.get("project").trim(), pool: data.get("pool").trim(), page: "0"});
  }},
  h("label", {}, "State", h("select", {name: "state"}, h("option", {value: ""}, "any"),
    JOB_STATES.map((s) => h("option", {value: s, selected: s === state}, s.toLowerCase())))),
  h("label", {}, "Name contains", h("input", {name: "name", type: "search", value: name})),
  h("label", {}, "User", h("input", {name: "owner", value: owner, size: 10})),
  h("label", {}, "Project", h("input", {name: "project", value: project, size: 12})),
  h("label", {}, "Pool", h("input", {name: "pool", value: pool, size: 10})),
  h("button", {type: "submit"}, "Filter"));
  const table = h("div");
  view.append(h("h1", {}, "Jobs"), form, table);
  return liveView(table, async () => {
    const query = new URLSearchParams({limit: PAGE_SIZE, offset: page * PAGE_SIZE, sort, order, count: "true"});
    for (const [k, v] of Object.entries({state, name, owner, project, pool})) if (v) query.set(k, v);
    const result = await getJSON(`/jobs?${query}`);
    const header = (key) => {
      const active = sort === key;
      return h("th", {"aria-sort": active ? (order === "asc" ? "ascending" : "descending") : "none", scope: "col"},
        h("button", {type: "button", onclick: () => go({sort: key, order: active && order === "desc" ? "asc" : "desc", page: "0"})},
          SORTABLE[key], active ? (order === "asc" ? " ▲" : " ▼") : ""));
    };
    const rows = result.items.map((job) => h("tr", {"data-job": job.id},
      h("td", {class: "num"}, h("a", {href: `#/jobs/${job.id}`}, job.id)),
      h("td", {}, h("a", {href: `#/jobs/${job.id}`}, job.name), kindMark(job), retryMark(job)),
      h("td", {}, badge(job.state), job.pending_reason && !TERMINAL.has(job.state) ? h("span", {class: "reason"}, job.pending_reason) : null),
      h("td", {}, taskSummary(job.task_counts)),
      h("td", {}, job.owner), h("td", {}, job.spec.project), h("td", {}, job.spec.pool),
      h("td", {class: "num"}, job.priority),
      h("td", {title: stamp(job.created_at)}, `${since(job.created_at)} ago`)));
    const first = result.total ? page * PAGE_SIZE + 1 : 0, last = page * PAGE_SIZE + result.items.length;
    fill(table,
      h("table", {"aria-label": "jobs"}, h("thead", {}, h("tr", {}, header("id"), header("name"), header("state"),
        h("th", {scope: "col"}, "Tasks"), h("th", {scope: "col"}, "User"), h("th", {scope: "col"}, "Project"),
        h("th", {scope: "col"}, "Pool"),
        header("priority"), header("created_at"))), h("tbody", {}, rows)),
      result.items.length ? null : h("p", {class: "muted"}, "No job matches."),
      h("nav", {class: "pager", "aria-label": "pages"},
        h("button", {type: "button", disabled: page === 0, onclick: () => go({page: String(page - 1)})}, "Previous"),
        h("span", {}, `${first}–${last} of ${result.total}`),
        h("button", {type: "button", disabled: last >= result.total, onclick: () => go({page: String(page + 1)})}, "Next")));
  }, {relevant: (e) => e.job_id !== null && (e.type.startsWith("job.") || e.type.startsWith("task."))});
}

function kindMark(job) {
  return job.spec.interactive
    ? h("span", {class: "tag kind", title: "an interactive job: a terminal people attach to (corral shell)"}, "interactive") : null;
}

function retryMark(job) {
  if (job.parent_job_id === undefined || job.parent_job_id === null) return null;
  return h("span", {class: "tag", title: `retry ${job.retry_count ?? ""} of job ${job.parent_job_id}`},
    `retry ${job.retry_count ?? ""} of #${job.parent_job_id}`);
}

// ---- one job ---------------------------------------------------------------------------------

function jobView(view, jobId) {
  const head = h("div"), spec = h("div"), tasks = h("div"), attached = h("div"), timeline = h("div");
  const logs = logViewer(jobId), terminal = terminalPanel(jobId, () => live.refresh()), whatIf = whatIfPanel(jobId);
  view.append(head, spec, whatIf.element, h("h2", {}, "Tasks and attempts"), tasks, terminal.element, h("h2", {}, "Attachments"), attached,
    h("h2", {}, "Logs"), logs.element, h("h2", {}, "Timeline"), timeline);
  const live = liveView(view, async () => {
    const [job, taskList, history, attachments] = await Promise.all([
      getJSON(`/jobs/${jobId}`), getJSON(`/jobs/${jobId}/tasks`), getJSON(`/jobs/${jobId}/history`),
      getJSON(`/jobs/${jobId}/attachments`).catch((error) => error)]);
    document.title = `${job.name} (#${job.id}) · corral`;
    fill(head, jobHead(job, live));
    fill(spec, jobSpec(job));
    whatIf.update(job);
    fill(tasks, tasksTable(taskList, job.spec.bundle, (task) => terminalButtons(job, task, terminal)));
    fill(attached, attachments instanceof Error
      ? h("p", {class: "error"}, `Could not read the attachments: ${attachments.message}`) : attachmentsTable(attachments));
    fill(timeline, timelineList(history));
    logs.update(taskList);
  }, {relevant: (e) => e.job_id === jobId || e.type.startsWith("worker.")});
  return {stop() { live.stop(); logs.stop(); terminal.stop(); document.title = "corral"; }, refresh: live.refresh};
}

// What would it take: for a pending job, the smallest changes that would start it sooner. Each answer runs the
// scheduler ahead some times over, so it is asked once when the job is seen pending, and again on request.
function whatIfPanel(jobId) {
  const body = h("div"), again = h("button", {type: "button", onclick: () => load()}, "Forecast again");
  const element = h("section", {class: "what-if", hidden: true},
    h("div", {class: "head"}, h("h2", {}, "What would it take"), h("div", {class: "actions"}, again)), body);
  let asked = false;
  async function load() {
    asked = true;
    again.disabled = true;
    fill(body, h("p", {class: "muted"}, "Forecasting…"));
    try { fill(body, whatIfTable(await getJSON(`/jobs/${jobId}/what-if`))); }
    catch (error) { fill(body, h("p", {class: "error"}, `Could not forecast: ${error.message}`)); }
    finally { again.disabled = false; }
  }
  return {element, update(job) {
    element.hidden = job.state !== "PENDING";
    if (!element.hidden && !asked) load();
  }};
}

function whatIfTable(answer) {
  const as = h("p", {}, answer.baseline.start_at === null ? "As it is: " : "As it is, it starts ",
    h("strong", {}, answer.baseline.text), ".");
  if (!answer.remedies.length) {
    return h("div", {}, as, h("p", {class: "muted"}, "No change of its request, pool, constraints or priority would start it meaningfully sooner."));
  }
  const when = (r) => r.text === "now" || r.start_at === null ? "now" : `in ${r.text} (at ${new Date(r.start_at * 1000).toLocaleTimeString()})`;
  return h("div", {}, as, h("table", {}, h("thead", {}, h("tr", {}, ["change", "starts", "on", "preempts"].map((c) => h("th", {}, c)))),
    h("tbody", {}, answer.remedies.map((r) => h("tr", {},
      h("td", {}, h("code", {}, r.change)), h("td", {}, when(r)), h("td", {}, r.workers.join(", ")),
      h("td", {}, r.preempts.map((id) => h("a", {href: `#/jobs/${id}`, class: "tag"}, `#${id}`))))))));
}

function jobHead(job, live) {
  const cancel = TERMINAL.has(job.state) || job.state === "TERMINATING" ? null
    : h("button", {type: "button", class: "danger", onclick: () => confirmCancel(job, live)}, "Cancel job");
  return h("div", {class: "head"}, h("h1", {}, `${job.name} `, h("span", {class: "muted"}, `#${job.id}`)), badge(job.state), kindMark(job),
    h("span", {class: "muted"}, `for ${since(job.state_since)}`), h("div", {class: "actions"}, cancel));
}

function confirmCancel(job, live) {
  const dialog = $("#confirm");
  $("#confirm-text").textContent = `Job ${job.id} (${job.name}) will be stopped: its tasks get SIGTERM, then SIGKILL after their grace period.`;
  dialog.onclose = async () => {
    if (dialog.returnValue !== "yes") return;
    try { await api(`/jobs/${job.id}/cancel`, {method: "POST"}); live.refresh(); }
    catch (error) { alert(`Could not cancel job ${job.id}: ${error.message}`); }
  };
  dialog.returnValue = "";
  dialog.showModal();
}

function jobSpec(job) {
  const s = job.spec, r = s.resources || {};
  const rows = [
    ["command", h("code", {}, (s.command || []).join(" "))],
    ["resources", `${r.cpu} CPU, ${bytes(r.memory)} memory, ${r.gpu} GPU per task`],
    ["replicas", `${s.replicas} ${s.gang ? "as a gang" : "independent"}`],
    ["tasks", taskSummary(job.task_counts)],
    ["priority", s.priority],
    ["retries", `${s.max_retries_failure} on failure, ${s.max_retries_preemption} on preemption; ` +
      `${s.max_task_failures} task failure(s) tolerated`],
  ];
  if (job.state === "PENDING" && job.estimate) {
    rows.unshift(["starts", h("span", {}, h("strong", {}, job.estimate.text),
      job.estimate.start_at ? h("span", {class: "muted"}, ` at ${new Date(job.estimate.start_at * 1000).toLocaleTimeString()}; ${job.estimate.basis}`) : null)]);
  }
  if (job.pending_reason && !TERMINAL.has(job.state)) rows.unshift(["waiting", h("strong", {}, job.pending_reason)]);
  rows.push(["project", s.project], ["pool", s.pool], ["workdir", workdirText(s)]);
  const epoch = job.epoch ?? job.preemption_epoch;
  if (epoch !== undefined && epoch !== null) rows.push(["drain epoch", epoch]);
  if (job.parent_job_id !== undefined && job.parent_job_id !== null) {
    rows.push(["retry of", h("a", {href: `#/jobs/${job.parent_job_id}`}, `job #${job.parent_job_id}`),
    ]);
  }
  if (job.retry_count) rows.push(["retry count", job.retry_count]);
  for (const key of ["retries", "retry_job_ids", "children"]) {
    if (Array.isArray(job[key]) && job[key].length) {
      rows.push([key === "children" ? "retried as" : "retry chain",
        h("span", {}, job[key].map((id) => h("a", {href: `#/jobs/${id.id ?? id}`, class: "tag"}, `#${id.id ?? id}`)))]);
    }
  }
  if (s.interactive) rows.push(["kind", `interactive: ends when its command exits, or after ${age(s.idle_timeout)} with nobody attached`]);
  if (s.time_limit) rows.push(["time limit", `${s.time_limit}s`]);
  if (Object.keys(s.env || {}).length) rows.push(["env", Object.entries(s.env).map(([k, v]) => h("span", {class: "tag"}, `${k}=${v}`))]);
  if (Object.keys(s.export || {}).length) rows.push(["exported", Object.keys(s.export).sort().map((k) => h("span", {class: "tag"}, k))]);
  if (Object.keys(s.labels || {}).length) rows.push(["labels", Object.entries(s.labels).map(([k, v]) => h("span", {class: "tag"}, `${k}=${v}`))]);
  if ((s.pip || []).length) rows.push(["pip", s.pip.map((item) => h("span", {class: "tag"}, item))]);
  if (s.python) rows.push(["python", s.python]);
  rows.push(["created", stamp(job.created_at)]);
  if (job.finished_at) rows.push(["finished", `${stamp(job.finished_at)} (after ${age(job.finished_at - job.created_at)})`]);
  return h("dl", {class: "spec"}, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

function workdirText(s) {
  if (!s.workdir) return s.bundle ? `none: an empty directory, with bundle ${s.bundle.slice(0, 12)}` : "none: an empty directory";
  return `${s.workdir.path} (${s.bundle ? `files uploaded as bundle ${s.bundle.slice(0, 12)}` : "files not uploaded: only workers that share it run it"})`;
}

function startText(world, bundle) {
  if (!world) return null;
  const text = world.start === "shared" ? `started in ${world.directory} (shared)`
    : world.start === "bundle" ? `started in a copy of bundle ${(bundle || "").slice(0, 8)} in ${world.directory}`
    : `started in empty ${world.directory}`;
  return h("div", {class: "start muted"}, text);
}

/** The tasks and their attempts; `actions` gives what a task's row offers (a terminal), or nothing. */
function tasksTable(taskList, bundle, actions) {
  const body = h("tbody");
  for (const task of taskList) {
    body.append(h("tr", {"data-task": task.index}, h("td", {class: "num"}, task.index), h("td", {}, badge(task.state)),
      h("td", {class: "num"}, task.attempt), h("td", {}, task.worker_id ?? "-"), h("td", {class: "num"}, task.exit_code ?? "-"),
      h("td", {}, `${task.state.toLowerCase()} for ${since(task.state_since)}`),
      h("td", {class: "num"}, `${task.failures} / ${task.preemptions}`), h("td", {}, task.reason ?? ""), h("td", {}, actions(task))));
    for (const a of task.attempts) {
      const ran = a.started_at && a.finished_at ? `, ran ${age(a.finished_at - a.started_at)}` : "";
      const w = a.world, seconds = w && w.env_seconds !== null ? `${w.env_seconds.toFixed(2)}s` : "";
      const env = w && w.env_key ? `; environment ${w.env_key.slice(0, 12)} ${w.env_cached ? `cached (${seconds})` : `built in ${seconds}`}` : "";
      body.append(h("tr", {class: "attempt"}, h("td", {}), h("td", {}, badge(a.state), a.state === "WORKER_FAILED" ? " (worker failure)" : ""),
        h("td", {class: "num"}, `#${a.attempt}`), h("td", {}, a.worker_id ?? "-"), h("td", {class: "num"}, a.exit_code ?? "-"),
        h("td", {}, `assigned ${clock(a.assigned_at)}, started ${clock(a.started_at)}, ended ${clock(a.finished_at)}${ran}${env}`,
          startText(a.world, bundle)),
        h("td", {}), h("td", {}, a.reason ?? ""), h("td", {})));
    }
  }
  return h("table", {"aria-label": "tasks"}, h("thead", {}, h("tr", {}, ["task", "state", "attempt", "worker", "exit",
    "times", "failures / preemptions", "reason", "terminal"].map((c) => h("th", {scope: "col"}, c)))), body);
}

function timelineList(history) {
  const kind = (e) => (["GIVE_UP", "EXPIRED"].includes(e.result) || ["FAILED", "LOST", "UNSCHEDULABLE", "WORKER_FAILED"].includes(e.to_state)
    ? "bad" : e.result === "NEED_RETRY" || e.result === "SKIPPED" ? "retry" : "ok");
  return h("ol", {class: "timeline", "aria-label": "transitions"}, history.map((e) => h("li", {class: kind(e)},
    h("span", {class: "when"}, clock(e.at)),
    e.task_index !== null ? `task ${e.task_index}${e.attempt !== null ? "#" + e.attempt : ""} ` : "job ",
    e.from_state ? [badge(e.from_state), " → "] : null, e.to_state ? badge(e.to_state) : null,
    h("span", {class: "muted"}, ` ${e.handler}${e.result === "SUCCESS" ? "" : " · " + e.result}`),
    e.message ? h("span", {class: "reason"}, e.message) : null)));
}

/** A task's log, read by offset and followed while the task is not over. */
function logViewer(jobId) {
  const select = h("select", {id: "log-task"}), streamSelect = h("select", {id: "log-stream"},
    h("option", {value: "stdout"}, "stdout"), h("option", {value: "stderr"}, "stderr"),
    h("option", {value: "build"}, "environment build"));
  const pre = h("pre", {class: "log", tabindex: "0", "aria-label": "task log", "aria-live": "off"});
  const element = h("div", {class: "logs"}, h("div", {class: "controls"},
    h("label", {for: "log-task"}, "Task", select), h("label", {for: "log-stream"}, "Stream", streamSelect)), pre);
  let key = "", offset = 0, attempt = null, timer = null, stopped = false, busy = false;
  const reset = () => { key = `${select.value}/${streamSelect.value}`; offset = 0; attempt = null; pre.textContent = ""; poll(); };
  select.addEventListener("change", reset);
  streamSelect.addEventListener("change", reset);
  async function poll() {
    if (stopped || busy || select.value === "") return;
    busy = true;
    const mine = key;
    try {
      while (!stopped && mine === key) {
        const query = new URLSearchParams({stream: streamSelect.value, offset: String(offset)});
        const response = await api(`/jobs/${jobId}/tasks/${select.value}/logs?${query}`);
        const served = Number(response.headers.get("X-Corral-Attempt"));
        if (attempt !== null && served !== attempt) { offset = 0; pre.textContent += `\n--- attempt ${served} ---\n`; }
        attempt = served;
        const text = await response.text();
        if (mine !== key) break;
        if (text) {
          const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
          pre.textContent += text;
          offset += new TextEncoder().encode(text).length;
          if (atBottom) pre.scrollTop = pre.scrollHeight;
        }
        const size = Number(response.headers.get("X-Corral-Log-Size") || offset);
        if (!text || offset >= size) break;
      }
    } catch (_) { /* the next poll tries again */ }
    busy = false;
  }
  return {
    element,
    update(taskList) {
      const chosen = select.value;
      if (select.options.length !== taskList.length) {
        fill(select, ...taskList.map((t) => h("option", {value: t.index}, `task ${t.index}`)));
        if (chosen !== "") select.value = chosen;
        if (key === "") reset();
      }
      const task = taskList.find((t) => String(t.index) === select.value);
      clearInterval(timer);
      if (task && !TERMINAL.has(task.state)) timer = setInterval(poll, 1000);
      poll();
    },
    stop() { stopped = true; clearInterval(timer); },
  };
}

// ---- queue -----------------------------------------------------------------------------------

// When a pending job is expected to start, as the estimator last said ("~4m after job 41"); blank until it has.
function startsText(job) {
  return job.state === "PENDING" && job.estimate ? job.estimate.text : h("span", {class: "muted"}, "not estimated yet");
}

function queueView(view, params) {
  const page = Math.max(0, Number(params.get("page") || 0));
  const body = h("div");
  view.append(h("h1", {}, "Queue"), h("p", {class: "muted"}, "Jobs with tasks waiting to be placed, in the order the scheduler considers them."), body);
  return liveView(body, async () => {
    const result = await getJSON(`/queue?limit=${PAGE_SIZE}&offset=${page * PAGE_SIZE}`);
    fill(body, result.items.length ? h("table", {"aria-label": "queue"},
      h("thead", {}, h("tr", {}, ["#", "job", "state", "starts", "waiting tasks", "priority", "pool", "waiting for", "reason"]
        .map((c) => h("th", {scope: "col"}, c)))),
      h("tbody", {}, result.items.map((entry) => h("tr", {}, h("td", {class: "num"}, entry.position),
        h("td", {}, h("a", {href: `#/jobs/${entry.job.id}`}, `#${entry.job.id} ${entry.job.name}`), retryMark(entry.job)),
        h("td", {}, badge(entry.job.state)), h("td", {}, startsText(entry.job)),
        h("td", {class: "num"}, entry.waiting_tasks), h("td", {class: "num"}, entry.job.priority),
        h("td", {}, entry.job.spec.pool), h("td", {}, since(entry.job.created_at)),
        h("td", {}, entry.job.pending_reason ?? h("span", {class: "muted"}, "not considered yet"))))))
      : h("p", {class: "muted"}, "Nothing is waiting."),
    h("nav", {class: "pager", "aria-label": "pages"},
      h("button", {type: "button", disabled: page === 0, onclick: () => { location.hash = `#/queue?page=${page - 1}`; }}, "Previous"),
      h("span", {}, `${result.total} waiting`),
      h("button", {type: "button", disabled: (page + 1) * PAGE_SIZE >= result.total, onclick: () => { location.hash = `#/queue?page=${page + 1}`; }}, "Next")));
  }, {relevant: (e) => e.job_id !== null || e.type.startsWith("worker.")});
}

// ---- workers ---------------------------------------------------------------------------------

function workersView(view) {
  const body = h("div");
  view.append(h("h1", {}, "Workers"), body);
  return liveView(body, async () => {
    const workers = await getJSON("/workers");
    fill(body, workers.length ? h("table", {"aria-label": "workers"},
      h("thead", {}, h("tr", {}, ["worker", "state", "pool", "labels", "use", "GPUs", "last heartbeat", "tasks"]
        .map((c) => h("th", {scope: "col"}, c)))),
      h("tbody", {}, workers.map((w) => h("tr", {"data-worker": w.id},
        h("td", {}, h("strong", {}, w.name), h("span", {class: "reason mono"}, `${w.id} · ${w.address}`)),
        h("td", {}, badge(w.state)), h("td", {}, w.pool ?? w.labels.pool ?? "default"),
        h("td", {}, Object.entries(w.labels).map(([k, v]) => h("span", {class: "tag"}, `${k}=${v}`))),
        h("td", {style: "min-width:320px"}, ["cpu", "gpu", "memory"].map((r) => useBar(r, w.used[r] || 0, w.capacity[r] || 0))),
        h("td", {style: "min-width:320px"}, (w.devices || []).length ? w.devices.map(deviceBar) : h("span", {class: "muted"}, "none")),
        h("td", {title: stamp(w.last_heartbeat)}, `${since(w.last_heartbeat)} ago`),
        h("td", {class: "num"}, w.running_tasks)))))
      : h("p", {class: "muted"}, "No worker has registered. Start one with `corral worker --controller URL --token-file FILE` (FILE holds the join token)."));
  }, {relevant: (e) => e.worker_id !== null, every: 5000});
}

// ---- deployments -----------------------------------------------------------------------------

function deploymentsView(view) {
  const body = h("div");
  view.append(h("h1", {}, "Deployments"), body);
  // Health checks that fail below the threshold change no state (no event): a short timer shows them too.
  return liveView(body, async () => {
    const {deployments} = await getJSON("/overview/deployments");
    fill(body, deployments.length ? deployments.map(deploymentCard)
      : h("p", {class: "muted"}, "Nothing is deployed. Deploy with `corral deploy NAME -- COMMAND`."));
  }, {relevant: (e) => e.deployment_id !== null, every: 2000, throttleMs: 300});
}

function deploymentCard(d) {
  const title = `deployment-${d.id}`;
  return h("section", {class: "card deployment", "data-deployment": d.name, "aria-labelledby": title},
    h("div", {class: "head"}, h("h2", {id: title}, d.name), badge(d.state),
      h("span", {class: d.ready < d.wanted ? "health bad" : "health ok", "data-ready": ""}, `${d.ready} / ${d.wanted} ready`),
      h("span", {class: "muted"}, `${d.state.toLowerCase()} for ${since(d.state_since)}`),
      h("span", {}, d.models.map((m) => h("span", {class: "tag", title: "model"}, m))),
      h("span", {class: "muted", title: "project"}, `project ${d.project}`)),
    h("div", {class: "columns"},
      h("div", {}, replicasTable(d)),
      h("div", {}, h("h3", {class: "muted"}, "events"), eventList(d.events))));
}

function replicasTable(d) {
  if (!d.replicas.length) return h("p", {class: "muted"}, "No replica is running.");
  return h("table", {"aria-label": `replicas of ${d.name}`}, h("thead", {}, h("tr", {},
    ["replica", "state", "health", "address", "worker"].map((c) => h("th", {scope: "col"}, c)))),
  h("tbody", {}, d.replicas.map((r) => h("tr", {"data-replica": r.id},
    h("td", {class: "num"}, h("a", {href: `#/jobs/${r.job_id}`, title: `job ${r.job_id}`}, r.id)),
    h("td", {}, badge(r.state), h("span", {class: "reason"}, `for ${since(r.state_since)}`)),
    h("td", {}, health(r)),
    h("td", {class: "mono"}, r.address ?? "-"),
    h("td", {}, r.worker_name ?? r.worker_id ?? "-")))));
}

function health(r) {
  if (r.probe_ok === null || r.probe_ok === undefined) return h("span", {class: "muted"}, "not checked yet");
  return h("span", {class: r.probe_ok ? "health ok" : "health bad"},
    r.probe_ok ? "passing" : `failing ${r.failures}×`,
    h("span", {class: "reason"}, `${r.probe_detail} · ${since(r.probed_at)} ago`));
}

function eventList(events) {
  if (!events.length) return h("p", {class: "muted"}, "No event kept.");
  const kind = (e) => (/unhealthy|evicted|failed|terminat/.test(e.type) ? "bad" : /replaced|scal|provision|degraded/.test(e.type) ? "retry" : "ok");
  return h("ol", {class: "timeline", "aria-label": "deployment events"}, [...events].reverse().map((e) => h("li", {class: kind(e), "data-event": e.id},
    h("span", {class: "when"}, clock(e.at)), h("strong", {}, e.type),
    e.replica_id !== null ? ` replica ${e.replica_id} ` : " ",
    e.from_state ? [badge(e.from_state), " → "] : null, e.to_state ? badge(e.to_state) : null,
    e.message ? h("span", {class: "reason"}, e.message) : null)));
}

// ---- sign in and out -------------------------------------------------------------------------

function showLogin(message) {
  stream.stop();
  if (current) { current.stop(); current = null; }
  fill($("#view"));
  $("#login").hidden = false;
  $("#logout").hidden = true;
  $("#who").hidden = true;
  $("#login-error").textContent = message || "";
  $("#live").textContent = "signed out";
  $("#token").focus();
}

function signOut(message) {
  token.clear();
  showLogin(message);
}

async function signIn(value) {
  const response = await fetch(`${API}/whoami`, {headers: {Authorization: `Bearer ${value}`}});
  if (!response.ok) {
    $("#login-error").textContent = response.status === 401 ? "That token was refused." : `The controller answered ${response.status}.`;
    return;
  }
  token.set(value);
  startApp(await response.json());
}

/** The header's "alice · member": who the token acts as, so a person sees whose rights the page shows. */
function showWho(me) {
  const who = $("#who");
  fill(who, h("strong", {}, me.name), ` · ${me.role}`);
  who.title = Object.entries(me.projects || {}).map(([project, role]) => `${project}: ${role}`).join(", ") || me.role;
  who.hidden = false;
}

async function startApp(me) {
  $("#login").hidden = true;
  $("#logout").hidden = false;
  stream.start();
  route();
  try { showWho(me || await getJSON("/whoami")); } catch (error) { handleError(error, $("#view")); }
}

document.addEventListener("DOMContentLoaded", () => {
  $("#login-form").addEventListener("submit", (e) => { e.preventDefault(); signIn($("#token").value.trim()); });
  $("#logout").addEventListener("click", () => signOut());
  window.addEventListener("hashchange", () => {
    if (!token.get()) return;
    route();
    $("#main").focus({preventScroll: true}); // keyboard and screen reader users start at the new page
  });
  if (token.get()) startApp(); else showLogin();
});
