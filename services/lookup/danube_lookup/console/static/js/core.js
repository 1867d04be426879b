// Shared pieces of the console: DOM building, number formats, the JSON API client with the
// session token, dialogs and notices. No framework: every node is built with h(), and text is
// always set as text (never parsed as HTML).

// ---------------------------------------------------------------- DOM
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") el.className = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

export function badge(text, kind) {
  return h("span", { class: `badge ${kind || "badge-" + String(text).replace(/[^a-z_]/gi, "")}` }, text);
}

// A table: columns are {label, cls?}; rows are arrays of cells (nodes or text) or
// {attrs, cells}. An empty table shows `empty`.
export function table(columns, rows, { empty = "Nothing to show.", attrs = {} } = {}) {
  const head = h("thead", {}, h("tr", {}, columns.map((c) => h("th", { class: c.cls }, c.label))));
  const body = h("tbody", {});
  if (rows.length === 0) {
    body.append(h("tr", {}, h("td", { class: "empty", colspan: columns.length }, empty)));
  }
  for (const row of rows) {
    const cells = Array.isArray(row) ? row : row.cells;
    const tr = h("tr", Array.isArray(row) ? {} : row.attrs);
    cells.forEach((cell, i) => {
      const cls = columns[i] && columns[i].cls;
      if (cell && cell.td) tr.append(h("td", { class: cls, ...cell.td }, cell.value));
      else tr.append(h("td", { class: cls }, cell));
    });
    body.append(tr);
  }
  return h("div", { class: "table-wrap" }, h("table", attrs, head, body));
}

// A table cell with attributes (e.g. data-field for tests): cell(value, {"data-field": "state"}).
export function cell(value, td) {
  return { value, td };
}

export function card(title, ...children) {
  return h("section", { class: "card" }, title ? h("h2", { class: "card-title" }, title) : null, children);
}

export function stat(label, value, sub, attrs) {
  return h(
    "div",
    { class: "stat", ...attrs },
    h("div", { class: "stat-label" }, label),
    h("div", { class: "stat-value", "data-field": "value" }, value),
    h("div", { class: "stat-sub" }, sub || "\u00a0"),
  );
}

export function keyValues(pairs, attrs) {
  return h(
    "dl",
    { class: "kv", ...attrs },
    pairs.filter(Boolean).map(([k, v, field]) => [h("dt", {}, k), h("dd", { "data-field": field }, v)]),
  );
}

// ---------------------------------------------------------------- formats
const intFmt = new Intl.NumberFormat("en-US", { maximumFractionDigits: 0 });
const oneFmt = new Intl.NumberFormat("en-US", { maximumFractionDigits: 1, minimumFractionDigits: 1 });

export const fmt = {
  int: (v) => (v === null || v === undefined ? "\u2013" : intFmt.format(v)),
  rate: (v) => (v === null || v === undefined ? "\u2013" : v < 100 ? oneFmt.format(v) : intFmt.format(v)),
  bytes(v) {
    if (v === null || v === undefined) return "\u2013";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (v >= 1024 && i < units.length - 1) {
      v /= 1024;
      i += 1;
    }
    return `${i === 0 ? intFmt.format(v) : oneFmt.format(v)} ${units[i]}`;
  },
  seconds(v) {
    if (!v) return "\u2013";
    if (v % 86400 === 0) return `${v / 86400} d`;
    if (v % 3600 === 0) return `${v / 3600} h`;
    if (v % 60 === 0) return `${v / 60} min`;
    return `${intFmt.format(v)} s`;
  },
  // A number with `digits` decimals ("–" when the value is missing).
  fixed: (v, digits = 3) => (Number.isFinite(v) ? v.toFixed(digits) : "\u2013"),
  pct: (v) => (v === null || v === undefined ? "\u2013" : `${oneFmt.format(v * 100)} %`),
  // Local date and time as YYYY-MM-DD HH:MM:SS.
  time(ms) {
    if (!ms) return "\u2013";
    const d = new Date(ms);
    const two = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${fmt.clock(ms)}`;
  },
  clock: (ms) => new Date(ms).toLocaleTimeString("en-GB", { hour12: false }),
  ago(ms) {
    if (!ms) return "\u2013";
    const s = Math.max(0, (Date.now() - ms) / 1000);
    if (s < 90) return `${Math.round(s)} s ago`;
    if (s < 5400) return `${Math.round(s / 60)} min ago`;
    if (s < 129600) return `${Math.round(s / 3600)} h ago`;
    return `${Math.round(s / 86400)} d ago`;
  },
};

// ---------------------------------------------------------------- session and API
const TOKEN_KEY = "danube.console.token";

export const session = {
  token: () => sessionStorage.getItem(TOKEN_KEY),
  setToken(token) {
    sessionStorage.setItem(TOKEN_KEY, token);
  },
  clearToken() {
    sessionStorage.removeItem(TOKEN_KEY);
  },
};

export class ApiError extends Error {
  constructor(status, body) {
    const err = (body && body.error) || {};
    super(err.message || `HTTP ${status}`);
    this.status = status;
    this.code = err.code || `HTTP_${status}`;
    this.retryable = Boolean(err.retryable);
  }

  get refused() {
    return this.status === 401 || this.status === 403;
  }
}

// Called with the ApiError of a 401 (set by the app: it opens the sign-in dialog).
let onUnauthenticated = () => {};
export function whenUnauthenticated(fn) {
  onUnauthenticated = fn;
}

export async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  const token = session.token();
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers, cache: "no-store" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let resp;
  try {
    resp = await fetch(path, init);
  } catch (exc) {
    throw new ApiError(0, { error: { code: "NETWORK", message: `the lookup did not answer (${exc.message})`, retryable: true } });
  }
  let data = null;
  try {
    data = await resp.json();
  } catch {
    data = null;
  }
  if (!resp.ok) {
    const err = new ApiError(resp.status, data);
    if (resp.status === 401) onUnauthenticated(err);
    throw err;
  }
  return data;
}

export const get = (path) => api("GET", path);
export const post = (path, body) => api("POST", path, body || {});

// Path segment of a topic name "/ns/topic" for /api/topics/{ns}/{topic}.
export function topicPath(name) {
  const [, ns, topic] = name.split("/");
  return `${encodeURIComponent(ns)}/${encodeURIComponent(topic)}`;
}

export function topicLink(name, text) {
  return h("a", { href: `#/topic/${name.replace(/^\//, "")}`, "data-topic-link": name }, text || name);
}

// ---------------------------------------------------------------- notices and error panels
export function notify(kind, text, { code } = {}) {
  const box = document.getElementById("notices");
  const close = h("button", { class: "notice-close", type: "button", "aria-label": "Dismiss" }, "\u00d7");
  const notice = h(
    "div",
    { class: `notice notice-${kind}`, role: kind === "error" ? "alert" : "status", "data-test": `notice-${kind}` },
    code ? h("strong", { class: "notice-code" }, code) : null,
    h("span", {}, text),
    close,
  );
  close.addEventListener("click", () => notice.remove());
  box.append(notice);
  if (kind !== "error") setTimeout(() => notice.remove(), 10000);
  return notice;
}

export function errorPanel(err, what) {
  const [title, kind] =
    err.status === 401
      ? ["Sign-in needed", "panel-refused"]
      : err.status === 403
        ? ["Refused", "panel-refused"]
        : err.status === 404
          ? ["Not available", "panel-info"]
          : ["Could not load", "panel-error"];
  return h(
    "div",
    { class: kind, role: "alert", "data-test": "error-panel" },
    h("div", { class: "panel-title" }, `${title}${what ? `: ${what}` : ""}`),
    h("code", { "data-field": "error-code" }, err.code),
    h("span", { "data-field": "error-message" }, ` ${err.message}`),
  );
}

export function describeError(err) {
  return err instanceof ApiError ? err : new ApiError(0, { error: { code: "CONSOLE", message: String(err) } });
}

// ---------------------------------------------------------------- dialogs
// Ask before an action: resolves to the dialog's form (a truthy value) or null when cancelled.
export function confirmAction({ title, body, confirmLabel = "Confirm", danger = false }) {
  const dialog = document.getElementById("confirm-dialog");
  dialog.querySelector('[data-slot="title"]').textContent = title;
  clear(dialog.querySelector('[data-slot="body"]'), body);
  const ok = dialog.querySelector('[data-slot="ok"]');
  ok.textContent = confirmLabel;
  ok.className = danger ? "danger" : "primary";
  dialog.returnValue = "";
  return new Promise((resolve) => {
    dialog.addEventListener(
      "close",
      () => resolve(dialog.returnValue === "ok" ? dialog.querySelector("form") : null),
      { once: true },
    );
    dialog.showModal();
  });
}

// Run an action behind its confirmation; report the result or the refusal.
export async function action(confirmation, run, describeResult) {
  const form = await confirmAction(confirmation);
  if (!form) return null;
  try {
    const result = await run(form);
    notify("ok", describeResult(result));
    return result;
  } catch (exc) {
    const err = describeError(exc);
    const prefix = err.status === 403 ? "Refused: " : err.status === 401 ? "Sign-in needed: " : "";
    notify("error", `${prefix}${err.message}`, { code: err.code });
    return null;
  }
}
