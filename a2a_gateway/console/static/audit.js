// The console's audit page: the audit log (GET /admin/api/audit), newest first, filtered by
// action, target and actor, a page at a time. Every value is written with textContent.
"use strict";

const auditView = { next: "" };

function auditPath(token) {
  const query = new URLSearchParams();
  for (const name of ["action", "target", "actor"]) {
    const value = $(`audit-${name}`).value.trim();
    if (value) query.set(name, value);
  }
  if (token) query.set("page_token", token);
  const text = query.toString();
  return `/admin/api/audit${text ? `?${text}` : ""}`;
}

// what changed: "field: before → after" per field, then the details
function auditChange(entry) {
  const before = entry.before || {};
  const after = entry.after || {};
  const lines = [];
  for (const name of new Set([...Object.keys(before), ...Object.keys(after)])) {
    const was = name in before ? JSON.stringify(before[name]) : "";
    const now = name in after ? JSON.stringify(after[name]) : "";
    lines.push(was && now ? `${name}: ${was} → ${now}` : `${name}: ${was || now}`);
  }
  for (const [name, value] of Object.entries(entry.details || {})) {
    lines.push(`${name}: ${JSON.stringify(value)}`);
  }
  return lines.join("\n");
}

function auditRow(entry) {
  const row = el("tr", null, { "data-audit-id": entry.id });
  const change = el("td", null, { class: "change" });
  change.append(el("pre", auditChange(entry)));
  row.append(el("td", localTime(entry.at), { title: entry.at }), el("td", entry.actor, { class: "actor" }),
    el("td", entry.action, { class: "action" }), el("td", entry.target, { class: "target" }), change);
  return row;
}

async function loadAudit(first) {
  const data = await api("GET", auditPath(first ? "" : auditView.next));
  const body = $("audit-table").tBodies[0];
  if (first) body.replaceChildren();
  for (const entry of data.entries) body.append(auditRow(entry));
  auditView.next = data.nextPageToken;
  $("audit-more").hidden = !auditView.next;
}

registerPage("audit", "audit-page", () => loadAudit(true));
$("audit-filters").addEventListener("submit", (event) => {
  event.preventDefault();
  act(() => loadAudit(true), "audit-page-error");
});
$("audit-more").addEventListener("click", () => act(() => loadAudit(false), "audit-page-error"));
