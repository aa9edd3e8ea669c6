// The console's usage page: the usage ledger (GET /admin/api/usage) for a range of days, by
// endpoint and caller (a table) and by day (a bar chart of tasks, SVG). Every value is written
// with textContent; money is shown in its own currency.
"use strict";

const DAY_MS = 86400000;

function usageDate(offsetDays) {
  return new Date(Date.now() + offsetDays * DAY_MS).toISOString().slice(0, 10);
}

function usageQuery(groupBy) {
  const query = new URLSearchParams({ group_by: groupBy });
  for (const [name, id] of [["from", "usage-from"], ["to", "usage-to"], ["endpoint", "usage-endpoint"],
    ["principal", "usage-principal"]]) {
    const value = $(id).value.trim();
    if (value) query.set(name, value);
  }
  return `/admin/api/usage?${query}`;
}

function moneyText(costs) {
  // [{currency, amount}] → "$0.0210 + €1.50"; an unknown code is shown as "0.021 XYZ"
  if (!costs || !costs.length) return "–";
  return costs.map(({ currency, amount }) => {
    try {
      return new Intl.NumberFormat(undefined, { style: "currency", currency, maximumFractionDigits: 6 })
        .format(Number(amount));
    } catch {
      return `${amount} ${currency}`;
    }
  }).join(" + ");
}

function durationText(seconds) {
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  if (seconds < 3600) return `${(seconds / 60).toFixed(1)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

function usageRow(totals, names) {
  const row = el("tr", null, { "data-endpoint": totals.endpoint, "data-principal": totals.principal });
  const outcomes = el("td", null, { class: "outcomes" });
  outcomes.append(outcomeBar(totals.outcomes, { width: 120, height: 12 }));
  row.append(
    el("td", names.get(totals.endpoint) || totals.endpoint, { class: "endpoint", title: totals.endpoint }),
    el("td", totals.principal, { class: "principal" }),
    el("td", totals.tasks, { class: "tasks" }), outcomes,
    el("td", durationText(totals.durationSeconds), { class: "duration" }),
    el("td", totals.requests, { class: "requests" }),
    el("td", `${totals.inputTokens} / ${totals.outputTokens}`, { class: "tokens" }),
    el("td", moneyText(totals.cost), { class: "cost" }),
  );
  return row;
}

function daysOf(from, to) {
  // every day from..to (inclusive) as YYYY-MM-DD, at most 400
  const days = [];
  for (let at = Date.parse(`${from}T00:00:00Z`); days.length < 400 && at <= Date.parse(`${to}T00:00:00Z`); at += DAY_MS) {
    days.push(new Date(at).toISOString().slice(0, 10));
  }
  return days;
}

function dayChart(totals, from, to, { width = 720, height = 120 } = {}) {
  // one bar per day (tasks that ended that day), tokens and cost in each bar's tooltip
  const byDay = new Map(totals.map((day) => [day.day, day]));
  const days = daysOf(from, to);
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height}`, width, height, class: "chart-svg usage-chart",
    role: "img" }, "tasks per day");
  const top = Math.max(1, ...totals.map((day) => day.tasks));
  const step = width / Math.max(days.length, 1);
  days.forEach((day, index) => {
    const totalsOfDay = byDay.get(day);
    const tasks = totalsOfDay ? totalsOfDay.tasks : 0;
    const barHeight = (tasks / top) * (height - 14);
    const tip = totalsOfDay
      ? `${day}: ${tasks} tasks, ${totalsOfDay.inputTokens} / ${totalsOfDay.outputTokens} tokens, ${moneyText(totalsOfDay.cost)}`
      : `${day}: no tasks`;
    svg.append(svgEl("rect", { x: (index * step + 1).toFixed(1), y: (height - 12 - barHeight).toFixed(1),
      width: Math.max(step - 2, 1).toFixed(1), height: barHeight.toFixed(1), fill: "#3b6fb6", class: "usage-bar",
      "data-day": day, "data-tasks": tasks }, tip));
  });
  svg.append(svgEl("line", { x1: 0, y1: height - 11.5, x2: width, y2: height - 11.5, class: "axis", stroke: "#888" }));
  for (const [index, day] of [[0, days[0]], [days.length - 1, days[days.length - 1]]]) {
    if (!day) continue;
    const label = svgEl("text", { x: index ? width - 2 : 2, y: height - 1, "text-anchor": index ? "end" : "start",
      "font-size": 10, fill: "#666" });
    label.textContent = day;
    svg.append(label);
  }
  return svg;
}

async function usageEndpoints() {
  const select = $("usage-endpoint");
  const chosen = select.value;
  const data = await api("GET", "/admin/api/endpoints");
  select.replaceChildren(el("option", "all", { value: "" }));
  for (const endpoint of data.endpoints) select.append(el("option", endpoint.name, { value: endpoint.id }));
  select.value = chosen;
  return new Map(data.endpoints.map((endpoint) => [endpoint.id, endpoint.name]));
}

async function loadUsage() {
  if (!$("usage-from").value) $("usage-from").value = usageDate(-29);
  if (!$("usage-to").value) $("usage-to").value = usageDate(0);
  const names = await usageEndpoints();
  const [table, days] = await Promise.all([
    api("GET", usageQuery("endpoint,principal")), api("GET", usageQuery("day")),
  ]);
  const body = $("usage-table").tBodies[0];
  body.replaceChildren(...table.totals.map((totals) => usageRow(totals, names)));
  $("usage-empty").hidden = table.totals.length > 0;
  $("usage-chart").replaceChildren(dayChart(days.totals, $("usage-from").value, $("usage-to").value));
  const tasks = days.totals.reduce((sum, day) => sum + day.tasks, 0);
  $("usage-summary").textContent = `${tasks} tasks ended from ${$("usage-from").value} to ${$("usage-to").value} (UTC)`;
}

registerPage("usage", "usage-page", loadUsage);
$("usage-filters").addEventListener("submit", (event) => {
  event.preventDefault();
  act(loadUsage, "usage-page-error");
});
