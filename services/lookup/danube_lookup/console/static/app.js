// The Danube web console: a hash router over four pages, each refreshed by polling the JSON
// API (a proxy to the lookup's admin API); sign-in with a bearer token when the cluster asks.

import { ApiError, clear, describeError, get, session, whenUnauthenticated } from "./js/core.js";
import { overviewPage } from "./js/overview.js";
import { plannerPage } from "./js/planner.js";
import { topicPage, topicsPage } from "./js/topics.js";

const ROUTES = [
  { pattern: /^\/?$/, nav: "overview", make: overviewPage },
  { pattern: /^\/topics\/?$/, nav: "topics", make: topicsPage },
  { pattern: /^\/topic\/(.+)$/, nav: "topics", make: topicPage },
  { pattern: /^\/planner\/?$/, nav: "planner", make: plannerPage },
];

const root = document.getElementById("page");
const live = document.getElementById("live");
const signinDialog = document.getElementById("signin-dialog");
const tokenInput = document.getElementById("token-input");
const signinButton = document.getElementById("signin-button");
const signoutButton = document.getElementById("signout-button");

let current = null; // {page, timer, generation, running, again}
let generation = 0;
let paused = false; // after a 401, until the user signs in
let authEnabled = false;

function setLive(state, text) {
  live.className = `live live-${state}`;
  live.textContent = text;
  live.dataset.state = state;
}

function route() {
  const path = decodeURIComponent(location.hash.replace(/^#/, "")) || "/";
  for (const r of ROUTES) {
    const m = path.match(r.pattern);
    if (m) return { ...r, params: m[1] ? m[1].split("/").filter(Boolean) : [] };
  }
  return null;
}

function notFound() {
  const el = document.createElement("div");
  el.className = "panel-info";
  el.textContent = `No page at ${location.hash}. Use the links above.`;
  return { el, refresh: async () => {}, intervalMs: 0 };
}

function show() {
  if (current) {
    clearTimeout(current.timer);
    if (current.page.destroy) current.page.destroy();
  }
  generation += 1;
  const gen = generation;
  const r = route();
  for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", Boolean(r && a.dataset.nav === r.nav));
  const page = r ? r.make({ params: r.params, refreshSoon: () => schedule(gen, 300) }) : notFound();
  current = { page, timer: null, generation: gen, running: false, again: false };
  clear(root, page.el);
  schedule(gen, 0);
}

// Refresh the current page after `delayMs` (right after the refresh in flight, if one is),
// then every `intervalMs` while it is shown.
function schedule(gen, delayMs) {
  if (!current || current.generation !== gen) return;
  if (current.running) {
    current.again = true;
    return;
  }
  clearTimeout(current.timer);
  current.timer = setTimeout(() => run(gen), delayMs);
}

async function run(gen) {
  const c = current;
  if (!c || c.generation !== gen || paused) return;
  c.running = true;
  c.again = false;
  try {
    await c.page.refresh();
    setLive("ok", `Live \u00b7 ${new Date().toLocaleTimeString("en-GB", { hour12: false })}`);
  } catch (exc) {
    const err = describeError(exc);
    if (err.status === 401) {
      c.running = false;
      setLive("paused", "Signed out");
      return; // resumes after sign-in
    }
    setLive("error", err.status === 403 ? "Refused" : "Error");
  }
  c.running = false;
  if (c.again) schedule(gen, 0);
  else if (c.page.intervalMs) schedule(gen, c.page.intervalMs);
}

function askForToken(reason) {
  paused = true;
  signinDialog.querySelector('[data-slot="reason"]').textContent = reason || "";
  tokenInput.value = "";
  if (!signinDialog.open) signinDialog.showModal();
}

whenUnauthenticated((err) => {
  updateSessionButtons();
  askForToken(
    session.token()
      ? `The token was refused (${err.code}): ${err.message}`
      : `The cluster refused the request without a token (${err.code}): ${err.message}`,
  );
});

signinDialog.addEventListener("close", () => {
  if (signinDialog.returnValue === "ok" && tokenInput.value.trim()) {
    session.setToken(tokenInput.value.trim().replace(/^Bearer\s+/i, ""));
    paused = false;
    updateSessionButtons();
    show();
  }
});

signinButton.addEventListener("click", () => askForToken(""));
signoutButton.addEventListener("click", () => {
  session.clearToken();
  paused = false; // the next refresh is refused and asks for a token
  updateSessionButtons();
  show();
});

function updateSessionButtons() {
  const signedIn = Boolean(session.token());
  signinButton.classList.toggle("hidden", !authEnabled || signedIn);
  signoutButton.classList.toggle("hidden", !signedIn);
}

async function start() {
  try {
    authEnabled = Boolean((await get("/api/info")).auth);
  } catch (exc) {
    if (!(exc instanceof ApiError)) throw exc;
  }
  updateSessionButtons();
  window.addEventListener("hashchange", show);
  show();
}

start();
