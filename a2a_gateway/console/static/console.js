// The operator console: endpoints and keys over the admin API, tasks over the event feed.
// Everything shown comes from the gateway and is written with textContent, never as HTML.
"use strict";

const TERMINAL = new Set(["TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"]);
const PAGES = ["login-page", "endpoints-page", "tasks-page", "task-page", "numbers-page"];
const MORE_PAGES = {};

// A page kept in a script of its own: ``#/<name>/<args…>`` shows ``section`` and calls
// ``open(args)``; its errors go to the element ``<section>-error``.
function registerPage(name, section, open) {
  MORE_PAGES[name] = { section, open };
  PAGES.push(section);
}
const state = {
  csrf: "",
  feed: null, feedUrl: "", tasks: new Map(), filters: { endpoint: "", state: "", context: "" },
  keysEndpoint: null,
  taskFeed: null, task: null,
};

const $ = (id) => document.getElementById(id);
const enc = encodeURIComponent;

function el(tag, text, attrs = {}) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  return node;
}

function shortState(name) {
  return String(name || "").replace(/^TASK_STATE_/, "").toLowerCase().replace(/_/g, "-");
}

function errorText(data, status) {
  if (data && data.error && typeof data.error.message === "string") return data.error.message;
  if (data && typeof data.error === "string") return data.error;
  return `HTTP ${status}`;
}

async function api(method, path, body) {
  const headers = {};
  if (method !== "GET") headers["X-CSRF-Token"] = state.csrf;
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method, headers, credentials: "same-origin", body: body === undefined ? undefined : JSON.stringify(body),
  });
  let data = null;
  try { data = await response.json(); } catch { data = null; }
  if (response.status === 401) showLogin();
  if (!response.ok) {
    const error = new Error(errorText(data, response.status));
    error.data = data;
    throw error;
  }
  return data;
}

async function act(action, errorId) {
  $(errorId).textContent = "";
  try { await action(); } catch (error) { $(errorId).textContent = error.message; }
}

// pages ----------------------------------------------------------------------------------

function show(page) {
  for (const id of PAGES) $(id).hidden = id !== page;
  $("nav").hidden = page === "login-page";
  document.body.dataset.page = page;
}

function showLogin() {
  state.csrf = "";
  stopFeed();
  closeTaskFeed();
  stopNumbers();
  show("login-page");
}

async function route() {
  if (!state.csrf) {
    try { useSession(await api("GET", "/console/api/session")); } catch { showLogin(); return; }
  }
  const parts = (location.hash || "#/tasks").slice(2).split("/").map(decodeURIComponent);
  closeTaskFeed();
  stopNumbers();
  state.task = null;
  if (parts[0] === "endpoints") {
    show("endpoints-page");
    await act(loadEndpoints, "endpoints-error");
    await act(openEndpointForm, "endpoint-problems");
  } else if (parts[0] === "numbers") {
    show("numbers-page");
    startNumbers();
  } else if (MORE_PAGES[parts[0]]) {
    const page = MORE_PAGES[parts[0]];
    show(page.section);
    await act(() => page.open(parts.slice(1)), `${page.section}-error`);
  } else if (parts[0] === "task" && parts.length === 4) {
    show("task-page");
    await act(() => openTask(parts[1], parts[2], parts[3]), "task-error");
  } else {
    show("tasks-page");
    startFeed();
  }
}

async function login(event) {
  event.preventDefault();
  $("login-error").textContent = "";
  const response = await fetch("/console/api/login", {
    method: "POST", headers: { "Content-Type": "application/json" }, credentials: "same-origin",
    body: JSON.stringify({ key: $("login-key").value }),
  });
  let data = null;
  try { data = await response.json(); } catch { data = null; }
  if (!response.ok) {
    $("login-error").textContent = errorText(data, response.status);
    return;
  }
  $("login-key").value = "";
  useSession(data);
  await route();
}

async function logout() {
  try { await api("POST", "/console/api/logout"); } finally { showLogin(); }
}

// endpoints ------------------------------------------------------------------------------

function authText(auth) {
  if (!auth) return "";
  if (auth.problem) return `misconfigured: ${auth.problem}`;
  const ways = [];
  if (auth.anonymous) ways.push("anonymous");
  if (auth.apiKey) ways.push("API key");
  if (auth.jwtIssuer) ways.push(`JWT (${auth.jwtIssuer})`);
  if (auth.trustedProxy) ways.push("trusted proxy");
  return ways.join(", ");
}

async function loadEndpoints() {
  const data = await api("GET", "/admin/api/endpoints");
  const body = $("endpoints-table").tBodies[0];
  body.replaceChildren();
  for (const endpoint of data.endpoints) body.append(endpointRow(endpoint));
}

function endpointRow(endpoint) {
  const row = el("tr", null, { "data-endpoint-id": endpoint.id });
  const card = el("td");
  if (/^https?:\/\//.test(endpoint.cardUrl)) {
    card.append(el("a", "card", { href: endpoint.cardUrl, target: "_blank", rel: "noopener noreferrer" }));
  }
  const actions = el("td");
  const toggle = el("button", endpoint.enabled ? "Disable" : "Enable", { type: "button", class: "toggle" });
  toggle.addEventListener("click", () => act(async () => {
    await api("POST", `/admin/api/endpoints/${enc(endpoint.id)}/${endpoint.enabled ? "disable" : "enable"}`);
    await loadEndpoints();
  }, "endpoints-error"));
  const keys = el("button", "Keys", { type: "button", class: "keys" });
  keys.addEventListener("click", () => act(() => openKeys(endpoint), "endpoints-error"));
  actions.append(toggle, keys);
  if (endpoint.enabled) { // the kill switch: disabled, and its running tasks canceled everywhere
    const kill = el("button", "Kill", { type: "button", class: "kill",
      title: "Disable and cancel its running tasks on every replica" });
    kill.addEventListener("click", () => act(async () => {
      await api("POST", `/admin/api/endpoints/${enc(endpoint.id)}/disable`, { cancelRunning: true });
      await loadEndpoints();
    }, "endpoints-error"));
    actions.append(kill);
  }
  const name = el("td", endpoint.name, { class: "name" });
  if (endpoint.endpointsFile) {
    const note = "Declared in the endpoints file: a change made here lasts until the file is applied again (SIGHUP or restart)";
    name.append(" ", el("span", "endpoints file", { class: "from-file", title: note }));
    toggle.title = note;
  }
  row.append(name, el("td", endpoint.handler), healthCell(endpoint.health),
    el("td", authText(endpoint.auth)), el("td", limitsText(endpoint.limits), { class: "limits" }),
    el("td", endpoint.enabled ? "yes" : "no", { class: "enabled" }), card, actions);
  return row;
}

async function createEndpoint(event) {
  event.preventDefault();
  showEndpointProblems([]);
  let body;
  try { body = endpointFormBody(); } catch (error) { // endpoint_form.js: refused before sending
    showEndpointProblems(error.problems || [error.message]);
    return;
  }
  body.name = $("endpoint-name").value;
  if ($("endpoint-public").checked) body.public = true;
  try {
    await api("POST", "/admin/api/endpoints", body);
    resetEndpointForm();
    await loadEndpoints();
  } catch (error) {
    showEndpointProblems(error.data && Array.isArray(error.data.problems) ? error.data.problems : [error.message]);
  }
}

async function openKeys(endpoint) {
  state.keysEndpoint = endpoint;
  $("keys-panel").hidden = false;
  $("keys-endpoint").textContent = endpoint.name;
  $("new-key-box").hidden = true;
  $("new-key").textContent = "";
  await loadKeys();
}

async function loadKeys() {
  const endpoint = state.keysEndpoint;
  const data = await api("GET", `/admin/api/endpoints/${enc(endpoint.id)}/keys`);
  const body = $("keys-table").tBodies[0];
  body.replaceChildren();
  for (const key of data.keys) {
    const row = el("tr", null, { "data-key-id": key.id });
    const actions = el("td");
    if (key.state === "active") {
      const revoke = el("button", "Revoke", { type: "button", class: "revoke" });
      revoke.addEventListener("click", () => act(async () => {
        await api("POST", `/admin/api/endpoints/${enc(endpoint.id)}/keys/${enc(key.id)}/revoke`);
        await loadKeys();
      }, "endpoints-error"));
      const kill = el("button", "Revoke and cancel", { type: "button", class: "revoke-kill",
        title: "Revoke, and cancel the running tasks of its principal on every replica" });
      kill.addEventListener("click", () => act(async () => {
        await api("POST", `/admin/api/endpoints/${enc(endpoint.id)}/keys/${enc(key.id)}/revoke`,
          { cancelRunning: true });
        await loadKeys();
      }, "endpoints-error"));
      actions.append(revoke, kill);
    }
    const limits = el("td", limitsText(key.limits), { class: "limits" });
    const edit = el("button", "Limits", { type: "button", class: "edit-limits" });
    edit.addEventListener("click", () => editLimits(endpoint, key, limits));
    actions.append(edit);
    row.append(el("td", key.id), el("td", key.principal), el("td", key.name), el("td", key.state, { class: "state" }),
      el("td", key.createdAt), el("td", key.expiresAt ?? "never", { class: "expires" }), limits, actions);
    body.append(row);
  }
}

// a key's quotas, written as the CLI takes them: NAME=VALUE, separated by spaces or commas
function limitsText(limits) {
  const pairs = Object.entries(limits || {}).map(([name, value]) => `${name}=${value}`);
  return pairs.length ? pairs.join(" ") : "none";
}

function parseLimits(text) {
  const limits = {};
  for (const pair of text.split(/[\s,]+/).filter(Boolean)) {
    const [name, value, ...rest] = pair.split("=");
    if (!name || value === undefined || rest.length) throw new Error(`limit ${pair}: expected NAME=VALUE`);
    // numbers as numbers; anything else goes as typed, for the gateway to name what is wrong
    limits[name] = value.trim() !== "" && Number.isFinite(Number(value)) ? Number(value) : value;
  }
  return limits;
}

function editLimits(endpoint, key, cell) {
  const input = el("input", null, { class: "limits-input", "aria-label": `limits of ${key.id}` });
  input.value = limitsText(key.limits) === "none" ? "" : limitsText(key.limits);
  const save = el("button", "Save", { type: "button", class: "save-limits" });
  save.addEventListener("click", () => act(async () => {
    await api("PUT", `/admin/api/endpoints/${enc(endpoint.id)}/keys/${enc(key.id)}/limits`,
      { limits: parseLimits(input.value) });
    await loadKeys();
  }, "endpoints-error"));
  cell.replaceChildren(input, save);
  input.focus();
}

async function createKey(event) {
  event.preventDefault();
  await act(async () => {
    const endpoint = state.keysEndpoint;
    const days = $("key-expires-days").value;
    const made = await api("POST", `/admin/api/endpoints/${enc(endpoint.id)}/keys`,
      { principal: $("key-principal").value || null, name: $("key-name").value,
        expiresDays: days === "" ? null : Number(days), limits: parseLimits($("key-limits").value) });
    $("new-key").textContent = made.key;
    $("new-key-box").hidden = false;
    await loadKeys();
  }, "endpoints-error");
}

// tasks: the live list -------------------------------------------------------------------

function feedUrl() {
  const query = new URLSearchParams();
  if (state.filters.endpoint) query.set("endpointId", state.filters.endpoint);
  if (state.filters.context) query.set("contextId", state.filters.context);
  const text = query.toString();
  return text ? `/events?${text}` : "/events";
}

function startFeed() {
  fillEndpointFilter();
  if (state.feed && state.feedUrl === feedUrl() && taskList.query === taskListQuery()) { renderTasks(); return; }
  stopFeed();
  state.tasks.clear();
  renderTasks();
  loadTaskPage(true);
  state.feedUrl = feedUrl();
  const source = new EventSource(state.feedUrl);
  state.feed = source;
  source.onopen = () => { $("feed-status").textContent = "live"; };
  source.onerror = () => { $("feed-status").textContent = "reconnecting"; };
  source.onmessage = (message) => {
    const event = JSON.parse(message.data);
    if (event.kind === "snapshot") for (const task of event.tasks) remember(task);
    else if (event.taskId) remember(event);
    renderTasks();
  };
}

function stopFeed() {
  if (state.feed) state.feed.close();
  state.feed = null;
  state.feedUrl = "";
}

async function fillEndpointFilter() {
  try {
    const data = await api("GET", "/admin/api/endpoints");
    const select = $("filter-endpoint");
    const chosen = select.value;
    select.replaceChildren(el("option", "all", { value: "" }));
    for (const endpoint of data.endpoints) select.append(el("option", endpoint.name, { value: endpoint.id }));
    select.value = chosen;
  } catch { /* the list shows its own errors */ }
}

function remember(event) {
  const seen = Date.parse(event.timestamp) || Date.now();
  const known = state.tasks.get(event.taskId);
  if (known && seen < Date.parse(known.timestamp)) return; // a page read before a newer feed event
  // a task first seen ended (an older page) has no known start: its duration is shown as "–"
  const task = known || { taskId: event.taskId, endpointId: event.endpointId, principal: event.principal,
    contextId: event.contextId, since: seen, startKnown: !TERMINAL.has(event.state) };
  task.state = event.state;
  task.timestamp = event.timestamp;
  task.since = Math.min(task.since, seen);
  task.ended = TERMINAL.has(event.state) ? seen : null;
  state.tasks.set(event.taskId, task);
}

function seconds(ms) {
  return `${Math.max(0, Math.round(ms / 1000))} s`;
}

function renderTasks() {
  // rows are kept per task and updated in place (a link stays the same element)
  const body = $("tasks-table").tBodies[0];
  const names = new Map([...$("filter-endpoint").options].map((option) => [option.value, option.textContent]));
  const wanted = state.filters.state;
  const tasks = [...state.tasks.values()]
    .filter((task) => !wanted || shortState(task.state) === wanted)
    .sort((a, b) => String(b.timestamp).localeCompare(String(a.timestamp)));
  const now = Date.now();
  const rows = new Map([...body.rows].map((row) => [row.dataset.taskId, row]));
  const shown = tasks.map((task) => {
    const row = rows.get(task.taskId) || taskRow(task);
    const cells = row.cells;
    cells[1].textContent = names.get(task.endpointId) || task.endpointId;
    cells[3].textContent = shortState(task.state);
    cells[4].textContent = seconds(now - task.since);
    cells[5].textContent = task.startKnown ? seconds((task.ended || now) - task.since) : "–";
    return row;
  });
  for (const [taskId, row] of rows) if (!shown.includes(row)) { row.remove(); rows.delete(taskId); }
  shown.forEach((row, index) => { if (body.rows[index] !== row) body.insertBefore(row, body.rows[index] || null); });
}

function taskRow(task) {
  const row = el("tr", null, { "data-task-id": task.taskId });
  const id = el("td");
  id.append(el("a", task.taskId,
    { href: `#/task/${enc(task.endpointId)}/${enc(task.principal)}/${enc(task.taskId)}`, class: "task-link" }));
  row.append(id, el("td"), el("td", task.principal), el("td", "", { class: "state" }), el("td"), el("td"));
  return row;
}

// tasks: recent tasks of any state, a page at a time (GET /admin/api/tasks) -----------------

const taskList = { query: "", next: "" };

function taskListQuery() {
  const query = new URLSearchParams({ page_size: "50" });
  if (state.filters.endpoint) query.set("endpoint", state.filters.endpoint);
  if (state.filters.state) query.set("state", state.filters.state);
  if (state.filters.context) query.set("context", state.filters.context);
  return query.toString();
}

async function loadTaskPage(first) {
  // the first page of the filters, or the next one; the feed adds what happens from now on
  const query = taskListQuery();
  if (first) taskList.next = "";
  else if (!taskList.next) return;
  taskList.query = query;
  $("tasks-more").hidden = true;
  await act(async () => {
    const token = first ? "" : `&page_token=${enc(taskList.next)}`;
    const data = await api("GET", `/admin/api/tasks?${query}${token}`);
    if (taskList.query !== query) return; // the filters changed meanwhile
    for (const task of data.tasks) remember(task);
    taskList.next = data.nextPageToken;
    $("tasks-more").hidden = !taskList.next;
    renderTasks();
  }, "tasks-error");
}

function applyFilters(event) {
  event.preventDefault();
  state.filters = { endpoint: $("filter-endpoint").value, state: $("filter-state").value, context: $("filter-context").value.trim() };
  startFeed();
}

// tasks: one task ------------------------------------------------------------------------

function closeTaskFeed() {
  if (state.taskFeed) state.taskFeed.close();
  state.taskFeed = null;
}

async function openTask(endpointId, principal, taskId) {
  const view = { endpointId, principal, taskId, texts: new Map(), last: "" };
  state.task = view;
  $("task-id").textContent = taskId;
  $("task-endpoint").textContent = endpointId;
  $("task-principal").textContent = principal;
  for (const id of ["task-context", "task-state", "task-text", "task-events", "task-json"]) $(id).textContent = "";
  $("task-stored").hidden = true;
  $("task-timeline").replaceChildren();
  $("task-history").replaceChildren();
  await loadTask();
  if (state.task === view && !TERMINAL.has(view.last)) followTask(view);
}

function taskPath(view) {
  return `/admin/api/endpoints/${enc(view.endpointId)}/tasks/${enc(view.taskId)}`;
}

function followTask(view) {
  // the task's own stream: every event, its text as it arrives (the feed has no text chunks)
  const source = new EventSource(`${taskPath(view)}/stream?principal=${enc(view.principal)}`);
  state.taskFeed = source;
  source.onmessage = (message) => onTaskEvent(view, message.data);
}

function onTaskEvent(view, data) {
  if (state.task !== view) return;
  $("task-events").textContent += `${data}\n`;
  const event = JSON.parse(data);
  const task = event.task;
  if (task) {
    addStatus(task.status.state, task.status.timestamp);
    for (const artifact of task.artifacts || []) applyArtifact({ artifact });
  }
  if (event.artifactUpdate) applyArtifact(event.artifactUpdate);
  const status = event.statusUpdate && event.statusUpdate.status;
  if (status) addStatus(status.state, status.timestamp);
  if (TERMINAL.has(view.last)) {
    closeTaskFeed();
    loadTask().catch((error) => { $("task-error").textContent = error.message; });
  }
}

function addStatus(name, timestamp) {
  const view = state.task;
  $("task-state").textContent = shortState(name);
  $("task-cancel").disabled = TERMINAL.has(name);
  if (view.last === name) return;
  view.last = name;
  $("task-timeline").append(el("li", `${shortState(name)} ${timestamp || ""}`.trim(), { "data-state": shortState(name) }));
}

function partsText(parts) {
  return (parts || []).map((part) => (typeof part.text === "string" ? part.text : "")).join("");
}

function applyArtifact(update) {
  const view = state.task;
  const artifact = update.artifact || {};
  const before = update.append ? view.texts.get(artifact.artifactId) || "" : "";
  view.texts.set(artifact.artifactId, before + partsText(artifact.parts));
  $("task-text").textContent = [...view.texts.values()].join("\n");
}

async function loadTask() {
  const view = state.task;
  const data = await api("GET", `${taskPath(view)}?principal=${enc(view.principal)}`);
  if (state.task !== view) return;
  const task = data.task;
  $("task-context").textContent = data.contextId;
  addStatus(data.state, data.timestamp);
  if ((task.artifacts || []).length) {
    view.texts = new Map(task.artifacts.map((artifact) => [artifact.artifactId, partsText(artifact.parts)]));
    $("task-text").textContent = [...view.texts.values()].join("\n");
  }
  const statusText = task.status && task.status.message ? partsText(task.status.message.parts) : "";
  $("task-history").replaceChildren(...(task.history || []).map(
    (message) => el("li", `${shortState(message.role).replace(/^role-/, "")}: ${partsText(message.parts)}`)));
  if (statusText && TERMINAL.has(data.state)) $("task-history").append(el("li", `status: ${statusText}`));
  showStoredTask(data);
}

async function cancelTask() {
  await act(async () => {
    const view = state.task;
    const data = await api("POST", `${taskPath(view)}/cancel?principal=${enc(view.principal)}`);
    addStatus(data.state, data.timestamp);
  }, "task-error");
}

// tasks: the raw A2A data of one task, for debugging ---------------------------------------
// The stream's events go to #task-events as they arrive (onTaskEvent); an ended task's stored
// JSON (history, artifacts, status) to #task-json. Both as text only.

function showStoredTask(data) {
  const ended = TERMINAL.has(data.state);
  $("task-json").textContent = ended ? JSON.stringify(data.task, null, 2) : "";
  $("task-stored").hidden = !ended;
}

// endpoints: backend health --------------------------------------------------------------

function localTime(iso) {
  const when = new Date(iso);
  return Number.isNaN(when.getTime()) ? String(iso) : when.toLocaleString();
}

function healthCell(health) {
  // the status word, coloured by its class, with the time of the outcome it stands for
  const cell = el("td", null, { class: "health" });
  if (!health) return cell;
  const status = ["ok", "failing", "unknown"].includes(health.status) ? health.status : "unknown";
  cell.append(el("span", status, { class: `health-status health-${status}` }));
  const error = health.last_error;
  const when = status === "failing" && error ? error.at : health.last_success;
  if (when) cell.append(" ", el("time", localTime(when), { datetime: when }));
  if (error && error.message) {
    const prefix = status === "failing" ? "" : `last error ${localTime(error.at)}: `;
    cell.append(el("div", prefix + error.message, { class: status === "failing" ? "health-message" : "health-message muted" }));
  }
  return cell;
}

// numbers at a glance: charts of GET /admin/api/stats, drawn as inline SVG ---------------
// "Whole fleet" (offered when the replicas share a Redis) sums the replicas' counts.

const SVG_NS = "http://www.w3.org/2000/svg";
const numbers = { timer: null, run: null, scope: "replica" };

function svgEl(tag, attrs = {}, title) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  if (title) {
    const tooltip = document.createElementNS(SVG_NS, "title");
    tooltip.textContent = title;
    node.append(tooltip);
  }
  return node;
}

function linePath(values, x, y) {
  // "M x y L x y …"; a null value (no data) breaks the line; a lone point is a short dash
  const steps = [];
  let run = 0;
  const endRun = () => { if (run === 1) steps.push("h3"); run = 0; };
  values.forEach((value, index) => {
    if (typeof value !== "number") { endRun(); return; }
    steps.push(`${run ? "L" : "M"}${x(index).toFixed(1)} ${y(value).toFixed(1)}`);
    run += 1;
  });
  endRun();
  return steps.join(" ");
}

function lineChart(lines, { width = 360, height = 70, title = "" } = {}) {
  // lines: [{ values, name }] on one scale from 0 to the highest value
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, width, height, class: "chart-svg", role: "img" }, title);
  const all = lines.flatMap((line) => line.values).filter((value) => typeof value === "number");
  const top = Math.max(...all, 0) || 1;
  const count = Math.max(2, ...lines.map((line) => line.values.length));
  const x = (index) => 1 + (index * (width - 2)) / (count - 1);
  const y = (value) => height - 1 - (value / top) * (height - 4);
  svg.append(svgEl("line", { x1: 0, y1: height - 0.5, x2: width, y2: height - 0.5, class: "axis" }));
  for (const line of lines) {
    const d = linePath(line.values, x, y);
    if (d) svg.append(svgEl("path", { d, class: `line line-${line.name}` }, line.label || line.name));
  }
  return svg;
}

function outcomeBar(totals, { width = 200, height = 14 } = {}) {
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, width, height, class: "bar-svg", role: "img" });
  const sum = Object.values(totals).reduce((a, b) => a + b, 0);
  let x = 0;
  for (const [outcome, count] of Object.entries(totals)) {
    const w = sum ? (count / sum) * width : 0;
    const known = ["completed", "failed", "canceled", "rejected"].includes(outcome) ? outcome : "other";
    svg.append(svgEl("rect", { x: x.toFixed(1), y: 0, width: w.toFixed(1), height, class: `outcome outcome-${known}` },
      `${outcome}: ${count}`));
    x += w;
  }
  return svg;
}

function seconds3(value) {
  if (typeof value !== "number") return "–";
  return value < 1 ? `${(value * 1000).toFixed(value < 0.01 ? 1 : 0)} ms` : `${value.toFixed(2)} s`;
}

function spanText(seconds) {
  // how far back the samples go: less than the window while the gateway is young
  return seconds < 120 ? `${Math.round(seconds)} s` : `${Math.round(seconds / 60)} min`;
}

function renderLatency(stats) {
  const latency = stats.latencySeconds;
  const overall = latency.window;
  $("latency-chart").querySelector(".chart").replaceChildren(lineChart(
    ["p50", "p95", "p99"].map((name) => ({ name, values: latency[name] })), { title: "request latency" }));
  $("latency-chart").querySelector(".legend").textContent =
    `last ${spanText(stats.seconds.reduce((a, b) => a + b, 0))}: p50 ${seconds3(overall.p50)}, p95 ${seconds3(overall.p95)}, ` +
    `p99 ${seconds3(overall.p99)} over ${overall.requests} requests`;
}

function renderFleetLatency(replicas) {
  // quantiles do not add up: each replica's p95, its newest point on the right
  const length = Math.max(...replicas.map((replica) => replica.seconds.length));
  const padded = (values) => Array(length - values.length).fill(null).concat(values);
  $("latency-chart").querySelector(".chart").replaceChildren(lineChart(
    replicas.map((replica) => ({ name: "p95", label: `${replica.replica} p95`, values: padded(replica.latencySeconds.p95) })),
    { title: "request latency p95 per replica" }));
  $("latency-chart").querySelector(".legend").textContent = "p95 per replica: " + replicas.map((replica) => {
    const overall = replica.latencySeconds.window;
    return `${replica.replica} ${seconds3(overall.p95)} over ${overall.requests} requests`;
  }).join("; ");
}

function fleetView(answer) {
  // the longest ring's columns, with the fleet's summed counts
  const longest = answer.replicas.reduce((a, b) => (b.seconds.length > a.seconds.length ? b : a));
  return { ...longest, endpoints: answer.summed.endpoints, openStreams: answer.summed.openStreams, fleet: answer };
}

function renderNumbers(stats, names) {
  if (stats.fleet) renderFleetLatency(stats.fleet.replicas); else renderLatency(stats);
  $("streams-chart").querySelector(".chart").replaceChildren(
    lineChart([{ name: "streams", values: stats.openStreams }], { title: "open streams" }));
  const streams = stats.openStreams;
  $("streams-chart").querySelector(".legend").textContent = `now ${streams.length ? streams[streams.length - 1] : 0}`;

  const body = $("numbers-table").tBodies[0];
  body.replaceChildren();
  for (const [endpointId, series] of Object.entries(stats.endpoints)) {
    const total = series.total;
    const requests = el("td", null, { class: "requests" });
    requests.append(lineChart([{ name: "requests", values: series.requests }, { name: "errors", values: series.errors }],
      { width: 240, height: 40, title: "requests and errors" }), el("span", total.requests, { class: "requests-total" }));
    const outcomes = el("td", null, { class: "outcomes" });
    const listed = Object.entries(total.tasks).map(([outcome, count]) => `${outcome} ${count}`).join(", ");
    outcomes.append(outcomeBar(total.tasks), el("span", listed || "none", { class: "outcomes-total" }));
    const row = el("tr", null, { "data-endpoint-id": endpointId });
    row.append(el("td", names.get(endpointId) || endpointId, { class: "name" }), requests,
      el("td", total.errors, { class: "errors-total" }), outcomes);
    body.append(row);
  }
  if (!body.rows.length) {
    const row = el("tr");
    row.append(el("td", "no A2A requests in the window", { colspan: 4 }));
    body.append(row);
  }
  const shown = stats.fleet ? "whole fleet" : `replica ${stats.replica}`;
  $("numbers-status").textContent =
    `${shown}, updated ${new Date().toLocaleTimeString()}, a point every ${stats.intervalSeconds} s`;
  renderScope(stats);
}

function renderScope(stats) {
  // the switch is offered when the replicas share a Redis (or the fleet is being shown)
  $("numbers-scope").hidden = !(stats.fleetAvailable || stats.fleet);
  const fleet = stats.fleet;
  let answered = "";
  if (fleet && fleet.fleetAvailable) {
    const count = fleet.answered.length;
    answered = `${count} ${count === 1 ? "replica" : "replicas"} answered: ${fleet.answered.join(", ")}`;
  } else if (fleet) {
    answered = `the fleet could not be read: replica ${fleet.answered.join(", ")} alone`;
  }
  $("numbers-answered").textContent = answered;
}

function startNumbers() {
  // reload every interval of the sampler (1 to 15 s) while the page is shown
  stopNumbers();
  const run = {};
  numbers.run = run;
  const next = async () => {
    let wait = 10;
    try {
      const fleet = numbers.scope === "fleet";
      const [answer, listed] = await Promise.all([
        api("GET", fleet ? "/admin/api/stats?scope=fleet" : "/admin/api/stats"), api("GET", "/admin/api/endpoints")]);
      if (numbers.run !== run) return;
      $("numbers-error").textContent = "";
      const stats = fleet ? fleetView(answer) : answer;
      renderNumbers(stats, new Map(listed.endpoints.map((endpoint) => [endpoint.id, endpoint.name])));
      wait = Math.min(15, Math.max(1, stats.intervalSeconds));
    } catch (error) {
      if (numbers.run === run) $("numbers-error").textContent = error.message;
    }
    if (numbers.run === run) numbers.timer = setTimeout(next, wait * 1000);
  };
  next();
}

function stopNumbers() {
  numbers.run = null;
  clearTimeout(numbers.timer);
  numbers.timer = null;
}

// who is logged in, and signing in through the OIDC issuer -------------------------------

function useSession(session) {
  state.csrf = session.csrf;
  const operator = session.operator || {};
  $("whoami").textContent = operator.via === "oidc" ? `${operator.name} (${operator.issuer})` : "operator key";
}

async function offerOidcSignIn() {
  // the issuer's link when the gateway has one (GET /console/api/oidc is 404 without)
  try {
    const response = await fetch("/console/api/oidc", { credentials: "same-origin" });
    if (!response.ok) return;
    const oidc = await response.json();
    $("oidc-issuer").textContent = oidc.issuer;
    $("oidc-sign-in-link").setAttribute("href", oidc.login);
    $("oidc-sign-in").hidden = false;
  } catch { /* the operator key form alone */ }
}

// start ----------------------------------------------------------------------------------

function init() {
  $("login-form").addEventListener("submit", login);
  $("logout").addEventListener("click", logout);
  $("endpoint-form").addEventListener("submit", createEndpoint);
  $("key-form").addEventListener("submit", createKey);
  $("task-filters").addEventListener("submit", applyFilters);
  $("tasks-more").addEventListener("click", () => loadTaskPage(false));
  $("task-cancel").addEventListener("click", cancelTask);
  $("numbers-scope").addEventListener("change", (event) => { numbers.scope = event.target.value; startNumbers(); });
  window.addEventListener("hashchange", route);
  setInterval(() => { if (!$("tasks-page").hidden) renderTasks(); }, 1000);
  offerOidcSignIn();
  route();
}

// after every deferred script: the page scripts register their pages first
document.addEventListener("DOMContentLoaded", init);
