// The planner page: the Spark planner's cluster load report, and the plan history with each
// move's outcome; request a dry-run plan, apply a proposed one.

import { action, badge, card, cell, clear, describeError, errorPanel, fmt, get, h, post, stat, table, topicLink } from "./core.js";

const PLANS_SHOWN = 20;

function scoreBar(score, max) {
  const bar = h("span", { class: "bar-fill" });
  bar.style.width = `${max > 0 ? Math.max(2, (score / max) * 100) : 0}%`;
  return h("span", { class: "bar" }, h("span", { class: "bar-track" }, bar), h("span", { class: "bar-value" }, fmt.fixed(score, 2)));
}

export function isLive(plan, now = Date.now()) {
  return !plan.expires_at_ms || plan.expires_at_ms > now;
}

export function plannerPage({ refreshSoon }) {
  const report = h("div", {});
  const plans = h("div", {});
  const open = new Set(); // plan ids whose details are unfolded
  const requestButton = h("button", { class: "primary", type: "button", "data-action": "request-plan" }, "Request a plan (dry run)\u2026");
  const el = h(
    "div",
    {},
    h("div", { class: "page-head" }, h("h1", {}, "Planner"), h("div", { class: "toolbar" }, requestButton)),
    report,
    h("h2", { class: "section-title" }, "Plan history"),
    plans,
  );

  requestButton.addEventListener("click", async () => {
    await action(
      {
        title: "Request a plan (dry run)?",
        body: h(
          "p",
          {},
          "The planner runs a cycle now and writes its plan as proposed: nothing moves until you apply it here " +
            "(or with danube-admin cluster apply-plan).",
        ),
        confirmLabel: "Request plan",
      },
      () => post("/api/rebalance", { dry_run: true }),
      (r) => `Requested (${r.request_id}). The plan appears below once the planner has answered.`,
    );
    refreshSoon();
  });

  async function apply(plan) {
    await action(
      {
        title: `Apply plan ${plan.plan_id}?`,
        body: [
          h("p", {}, `The load manager carries out its ${(plan.moves || []).length} move(s), one topic at a time; producers and consumers follow their topics.`),
          movesTable(plan.moves || [], { compact: true }),
        ],
        confirmLabel: "Apply plan",
        danger: true,
      },
      () => post(`/api/plans/${encodeURIComponent(plan.plan_id)}/apply`, {}),
      (r) => `Plan ${r.plan.plan_id} is ${r.plan.status}: the load manager executes it.`,
    );
    refreshSoon();
  }

  function renderReport(doc) {
    const r = doc.report;
    const imb = r.imbalance || {};
    const totals = r.totals || {};
    const by = r.planner || {};
    const maxScore = Math.max(0, ...(r.brokers || []).map((b) => b.score || 0));
    const planLine = r.plan
      ? r.plan.plan_id
        ? `plan ${r.plan.plan_id}: ${r.plan.moves} move(s), imbalance after ${fmt.fixed(r.plan.imbalance_after)} (${r.plan.stopped})`
        : r.plan.skipped || "no plan needed"
      : "\u2013";
    clear(
      report,
      h(
        "div",
        { class: "stats" },
        stat("Report", fmt.ago(r.generated_at_ms), fmt.time(r.generated_at_ms), { "data-stat": "generated" }),
        stat("Imbalance (CV)", fmt.fixed(imb.cv), `scores ${fmt.fixed(imb.min_score, 2)} \u2013 ${fmt.fixed(imb.max_score, 2)}`, { "data-stat": "cv" }),
        stat("Brokers", fmt.int(totals.brokers), `${fmt.int(imb.active_brokers)} active`, { "data-stat": "brokers" }),
        stat("Topics", fmt.int(totals.topics), `backlog ${fmt.int(totals.backlog)}`, { "data-stat": "topics" }),
        stat("Messages in", `${fmt.rate(totals.msg_rate_in)}/s`, `${fmt.rate(totals.msg_rate_out)}/s out`, { "data-stat": "rates" }),
      ),
      card(
        "Load report",
        h(
          "p",
          { class: "muted small" },
          `By ${by.candidate_id} (engine ${by.engine}, term ${by.term}) from ${fmt.int(r.window && r.window.samples)} samples; last cycle: ${planLine}.`,
        ),
        table(
          [
            { label: "Broker" },
            { label: "State" },
            { label: "Topics", cls: "num" },
            { label: "Msg/s in", cls: "num" },
            { label: "Msg/s out", cls: "num" },
            { label: "Backlog", cls: "num" },
            { label: "CPU", cls: "num" },
            { label: "Memory", cls: "num" },
            { label: "Load score" },
          ],
          (r.brokers || []).map((b) => ({
            attrs: { "data-report-broker": b.broker_id },
            cells: [
              h("strong", {}, b.broker_id),
              badge(b.state, `badge-${b.state}`),
              cell(fmt.int(b.topics), { "data-field": "topics" }),
              fmt.rate(b.msg_rate_in),
              fmt.rate(b.msg_rate_out),
              fmt.int(b.backlog),
              fmt.pct(b.cpu),
              fmt.pct(b.memory),
              scoreBar(b.score || 0, maxScore),
            ],
          })),
          { attrs: { "data-test": "report-brokers" } },
        ),
      ),
      card(
        "Hot topics",
        table(
          [{ label: "Topic" }, { label: "Broker" }, { label: "Load", cls: "num" }, { label: "Msg/s in", cls: "num" }, { label: "Msg/s out", cls: "num" }, { label: "Backlog", cls: "num" }],
          (r.hot_topics || []).map((t) => [
            topicLink(t.topic),
            t.broker_id,
            `${fmt.fixed(t.load)}${t.estimated ? " (est.)" : ""}`,
            fmt.rate(t.msg_rate_in),
            fmt.rate(t.msg_rate_out),
            fmt.int(t.backlog),
          ]),
          { empty: "No topic carries load." },
        ),
      ),
    );
  }

  function planCard(doc) {
    const p = doc.plan;
    const live = isLive(p);
    const details = h("details", { class: "plan", "data-plan": p.plan_id, open: open.has(p.plan_id) });
    details.addEventListener("toggle", () => (details.open ? open.add(p.plan_id) : open.delete(p.plan_id)));
    const moves = p.moves || [];
    const settled = moves.filter((m) => m.status === "done").length;
    const applyButton =
      p.status === "proposed" && live
        ? h("button", { class: "small primary", type: "button", "data-action": "apply", onclick: (e) => (e.preventDefault(), apply(p)) }, "Apply\u2026")
        : null;
    details.append(
      h(
        "summary",
        {},
        h("span", { class: "plan-id mono" }, p.plan_id),
        h("span", { "data-field": "status" }, badge(p.status, `badge-${p.status}`)),
        !live && p.status !== "done" ? badge("expired", "badge-expired") : null,
        h("span", { class: "muted" }, fmt.ago(p.created_at_ms)),
        h("span", {}, `${moves.length} move(s)${moves.length ? `, ${settled} done` : ""}`),
        h("span", { class: "muted" }, `imbalance ${fmt.fixed(p.imbalance_before)} \u2192 ${fmt.fixed(p.imbalance_after)}`),
        h("span", { class: "spacer" }),
        applyButton,
      ),
      h(
        "div",
        { class: "plan-body" },
        h(
          "p",
          { class: "muted small" },
          `Created ${fmt.time(p.created_at_ms)} by ${(p.planner || {}).candidate_id} (term ${(p.planner || {}).term}); expires ${fmt.time(p.expires_at_ms)}; stopped: ${p.stopped}` +
            `${p.finished_at_ms ? `; finished ${fmt.time(p.finished_at_ms)}` : ""}` +
            `${Object.keys(p.excluded || {}).length ? `; not considered: ${Object.entries(p.excluded).map(([k, v]) => `${v} ${k}`).join(", ")}` : ""}.`,
        ),
        movesTable(moves),
      ),
    );
    return details;
  }

  function renderPlans(resp) {
    clear(
      plans,
      resp.pending_requests.length
        ? h("div", { class: "panel-info", "data-test": "pending-requests" }, `Waiting for the planner: ${resp.pending_requests.join(", ")}`)
        : null,
      resp.plans.length
        ? resp.plans.map(planCard)
        : card(null, h("p", { class: "muted" }, "No plans yet: the planner writes one when the cluster is unbalanced or a plan is requested.")),
    );
  }

  async function refresh() {
    const [r, p] = await Promise.allSettled([get("/api/load-report"), get(`/api/plans?limit=${PLANS_SHOWN}`)]);
    if (r.status === "fulfilled") renderReport(r.value);
    else clear(report, errorPanel(describeError(r.reason), "the load report"));
    if (p.status === "fulfilled") renderPlans(p.value);
    else clear(plans, errorPanel(describeError(p.reason), "the plans"));
    const refused = [r, p].find((x) => x.status === "rejected" && describeError(x.reason).refused);
    if (refused) throw refused.reason;
  }

  return { el, refresh, intervalMs: 5000 };
}

function movesTable(moves, { compact = false } = {}) {
  const columns = [{ label: "Topic" }, { label: "From" }, { label: "To" }, { label: "Load", cls: "num" }];
  if (!compact) columns.push({ label: "Outcome" }, { label: "Reason" }, { label: "Started" }, { label: "Finished" });
  return table(
    columns,
    moves.map((m) => {
      const cells = [topicLink(m.topic), m.from, m.to, fmt.fixed(m.load)];
      if (!compact) {
        cells.push(
          cell(badge(m.status, `badge-${m.status}`), { "data-field": "status" }),
          m.reason || h("span", { class: "muted" }, "\u2013"),
          m.started_at_ms ? fmt.time(m.started_at_ms) : "\u2013",
          m.finished_at_ms ? fmt.time(m.finished_at_ms) : "\u2013",
        );
      }
      return { attrs: { "data-move": m.topic }, cells };
    }),
    { empty: "No moves: the cluster was balanced." },
  );
}
