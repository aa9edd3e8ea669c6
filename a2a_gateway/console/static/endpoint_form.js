// The new-endpoint form: the handlers the gateway offers (GET /admin/api/handlers) in a
// select, and a field per setting of the chosen handler built from its settings' JSON schema
// (text, number, checkbox, a select for a choice, a JSON box for lists and objects). An empty
// field is not sent: the gateway's settings and then the handler's default apply (shown as
// placeholders). A secret is taken only as an env:NAME reference, refused before sending.
// "other" names a handler outside the list; the JSON box below the fields holds any further
// settings (all of them for such a handler). Uses console.js's $, el and api.
"use strict";

const endpointForm = { handlers: null, chosen: null, fields: new Map() };
const ENV_REFERENCE = /^env:[A-Za-z_][A-Za-z0-9_]*$/;

class EndpointFormError extends Error {
  constructor(problems) {
    super(problems.join("; "));
    this.problems = problems;
  }
}

// the handler list, asked once per page load (it does not change while the gateway runs)
async function openEndpointForm() {
  if (endpointForm.handlers !== null) return;
  const answer = await api("GET", "/admin/api/handlers");
  endpointForm.handlers = new Map(answer.handlers.map((handler) => [handler.handler, handler]));
  const choice = $("endpoint-handler-choice");
  const other = choice.querySelector('option[value=""]');
  for (const path of endpointForm.handlers.keys()) {
    choice.insertBefore(el("option", path, { value: path }), other);
  }
  choice.value = endpointForm.handlers.has($("endpoint-handler").value) ? $("endpoint-handler").value : "";
  chooseHandler();
}

function chooseHandler() {
  const path = $("endpoint-handler-choice").value;
  const handler = endpointForm.handlers && endpointForm.handlers.get(path);
  endpointForm.chosen = handler || null;
  $("endpoint-handler-other").hidden = Boolean(handler);
  if (handler) $("endpoint-handler").value = path;
  $("endpoint-handler-description").textContent = handler ? plainText(handler.description) : "";
  const body = $("endpoint-fields").tBodies[0];
  body.replaceChildren();
  endpointForm.fields.clear();
  $("endpoint-fields").hidden = !handler;
  if (!handler) return;
  const required = new Set(handler.settings.required || []);
  for (const [name, schema] of Object.entries(handler.settings.properties || {})) {
    const field = settingField(name, schema, required.has(name));
    endpointForm.fields.set(name, field);
    body.append(field.row);
  }
}

// docstrings mark code as ``code``
function plainText(text) {
  return String(text || "").replace(/``/g, "");
}

// one setting: its kind, input, help text and the cell its problems go to
function fieldKind(schema) {
  const options = (schema.anyOf || [schema]).filter((option) => option.type !== "null");
  if (options.length !== 1) return { kind: "json", schema };
  const one = options[0];
  if (Array.isArray(one.enum)) return { kind: "choice", schema: one };
  if (["boolean", "integer", "number", "string"].includes(one.type)) return { kind: one.type, schema: one };
  return { kind: "json", schema: one };
}

function settingField(name, schema, required) {
  const { kind, schema: typed } = fieldKind(schema);
  const secret = schema["x-secret"] === true;
  const id = `setting-${name}`;
  const hasDefault = Object.hasOwn(schema, "default");
  const shownDefault = hasDefault && schema.default !== null ? schema.default : undefined;
  let input;
  if (kind === "choice") {
    input = el("select", null, { id });
    input.append(el("option", shownDefault === undefined ? "(not set)" : `default (${shownDefault})`, { value: "" }));
    for (const value of typed.enum) input.append(el("option", value, { value: JSON.stringify(value) }));
  } else if (kind === "boolean") {
    input = el("input", null, { id, type: "checkbox" });
    input.checked = shownDefault === true;
  } else if (kind === "json") {
    input = el("textarea", null, { id, placeholder: shownDefault === undefined ? "JSON" : JSON.stringify(shownDefault) });
  } else {
    input = el("input", null, { id, type: kind === "string" ? "text" : "number" });
    if (kind !== "string") input.setAttribute("step", kind === "integer" ? "1" : "any");
    if (kind !== "string" && typeof typed.minimum === "number") input.setAttribute("min", String(typed.minimum));
    const hint = secret ? "env:NAME" : shownDefault === undefined ? "" : String(shownDefault);
    if (hint) input.setAttribute("placeholder", hint);
  }
  if (required) input.required = true;
  const label = el("label", null, { for: id, class: "setting-name" });
  label.append(el("code", name));
  if (required) label.append(" ", el("span", "required", { class: "muted" }));
  if (secret) label.append(" ", el("span", "secret: env:NAME", { class: "muted secret" }));
  const problems = el("div", null, { class: "error setting-problems" });
  const about = el("td", null, { class: "setting-about" });
  about.append(el("div", plainText(schema.description), { class: "muted" }), problems);
  const row = el("tr", null, { "data-setting": name });
  const cell = el("td");
  cell.append(input);
  row.append(el("td", null), cell, about);
  row.firstChild.append(label);
  return { name, kind, secret, input, problems, default: shownDefault, row };
}

// the settings of the form, checked as far as the page can; EndpointFormError names the fields
function fieldValue(field) {
  const { input, kind } = field;
  if (kind === "boolean") return input.checked === (field.default === true) ? undefined : input.checked;
  if (kind === "choice") return input.value === "" ? undefined : JSON.parse(input.value);
  const text = input.value.trim();
  if (text === "") {
    if (input.validity && input.validity.badInput) throw new Error("not a number");
    return undefined;
  }
  if (kind === "json") {
    try { return JSON.parse(text); } catch { throw new Error("not JSON"); }
  }
  if (kind === "integer" || kind === "number") {
    const number = Number(text);
    if (!Number.isFinite(number) || (kind === "integer" && !Number.isInteger(number))) {
      throw new Error(kind === "integer" ? "not a whole number" : "not a number");
    }
    return number;
  }
  return input.value;
}

function secretProblem(value) {
  return typeof value === "string" && !ENV_REFERENCE.test(value)
    ? "a secret is entered as an env:NAME reference (the gateway reads the variable), not as its value"
    : null;
}

function endpointFormBody() {
  const problems = [];
  const settings = {};
  for (const field of endpointForm.fields.values()) {
    let value;
    try { value = fieldValue(field); } catch (error) {
      problems.push(`${field.name}: ${error.message}`);
      continue;
    }
    if (value === undefined) continue;
    const refused = field.secret ? secretProblem(value) : null;
    if (refused) problems.push(`${field.name}: ${refused}`);
    else settings[field.name] = value;
  }
  let extra;
  try { extra = JSON.parse($("endpoint-settings").value || "{}"); } catch (error) {
    problems.push(`settings: ${error.message}`);
    extra = {};
  }
  if (extra === null || typeof extra !== "object" || Array.isArray(extra)) {
    problems.push("settings: the JSON box holds an object of settings");
    extra = {};
  }
  const secrets = new Set(endpointForm.chosen ? endpointForm.chosen.secrets : []);
  for (const [name, value] of Object.entries(extra)) {
    if (Object.hasOwn(settings, name)) problems.push(`${name}: set both in its field and in the JSON box`);
    const refused = secrets.has(name) ? secretProblem(value) : null;
    if (refused) problems.push(`${name}: ${refused}`);
    settings[name] = value;
  }
  if (problems.length) throw new EndpointFormError(problems);
  return { handler: $("endpoint-handler").value, settings };
}

// problems: every one in the list under the form, and each next to the field it names
function showEndpointProblems(problems) {
  const list = $("endpoint-problems");
  list.replaceChildren();
  for (const field of endpointForm.fields.values()) field.problems.replaceChildren();
  for (const problem of problems) {
    list.append(el("li", problem));
    for (const part of problem.replace(/^invalid handler settings: /, "").split("; ")) {
      for (const field of endpointForm.fields.values()) {
        if (namesField(part, field.name)) field.problems.append(el("div", part));
      }
    }
  }
}

function namesField(problem, name) {
  return problem.startsWith(`${name}:`) || problem.startsWith(`${name}.`);
}

function resetEndpointForm() {
  $("endpoint-name").value = "";
  $("endpoint-settings").value = "{}";
  chooseHandler();
}

document.addEventListener("DOMContentLoaded", () => {
  $("endpoint-handler-choice").addEventListener("change", chooseHandler);
});
