// The topics list and the topic page: partitions, owner, rates (live plot), backlog per
// subscription, the log's offsets (local WAL and object storage) and compacted view; moving a topic.

import { LiveChart, Samples } from "./chart.js";
import {
  action,
  badge,
  card,
  cell,
  clear,
  describeError,
  errorPanel,
  fmt,
  get,
  h,
  keyValues,
  post,
  stat,
  table,
  topicLink,
  topicPath,
} from "./core.js";

// ---------------------------------------------------------------- the list
export function topicsPage() {
  let namespace = "";
  let filter = "";
  const select = h("select", { "aria-label": "Namespace", "data-test": "namespace" }, h("option", { value: "" }, "All namespaces"));
  const search = h("input", { type: "search", placeholder: "Filter by name", "aria-label": "Filter", "data-test": "filter" });
  const list = h("div", {});
  let last = null;
  const el = h(
    "div",
    {},
    h("div", { class: "page-head" }, h("h1", {}, "Topics"), h("div", { class: "toolbar" }, select, search)),
    card(null, list),
  );
  select.addEventListener("change", () => {
    namespace = select.value;
    refresh();
  });
  search.addEventListener("input", () => {
    filter = search.value.trim().toLowerCase();
    if (last) render(last);
  });

  function typeCell(t) {
    return t.dispatch_strategy === "reliable" ? badge("reliable", "badge-reliable") : badge("non-reliable", "badge-plain");
  }

  function row(t, child) {
    return {
      attrs: { "data-topic": t.name, class: child ? "child-row" : "" },
      cells: [
        cell(h("span", { class: child ? "indent" : "" }, topicLink(t.name)), { "data-field": "name" }),
        typeCell(t),
        cell(t.durability || "\u2013", { "data-field": "durability" }),
        cell(t.partitions ? fmt.int(t.partitions) : "\u2013", { "data-field": "partitions" }),
        cell(t.partitions ? "\u2013" : t.broker_id || h("span", { class: "muted" }, "unassigned"), { "data-field": "broker_id" }),
        t.dispatch_strategy === "reliable" ? retention(t) : "\u2013",
        fmt.time(t.created_at_ms),
      ],
    };
  }

  function render(topics) {
    last = topics;
    const shown = topics.filter(
      (t) => !filter || t.name.toLowerCase().includes(filter) || t.partition_topics.some((p) => p.name.toLowerCase().includes(filter)),
    );
    const rows = shown.flatMap((t) => [row(t, false), ...t.partition_topics.map((p) => row(p, true))]);
    clear(
      list,
      table(
        [
          { label: "Topic" },
          { label: "Type" },
          { label: "Durability" },
          { label: "Partitions", cls: "num" },
          { label: "Owner broker" },
          { label: "Retention" },
          { label: "Created" },
        ],
        rows,
        { empty: filter ? "No topic matches the filter." : "No topics yet.", attrs: { "data-test": "topics" } },
      ),
    );
  }

  async function refresh() {
    const [ns, topics] = await Promise.allSettled([
      get("/api/namespaces"),
      get(`/api/topics${namespace ? `?namespace=${encodeURIComponent(namespace)}` : ""}`),
    ]);
    if (ns.status === "fulfilled" && select.options.length !== ns.value.namespaces.length + 1) {
      clear(select, h("option", { value: "" }, "All namespaces"), ns.value.namespaces.map((n) => h("option", { value: n }, n)));
      select.value = namespace;
    }
    if (topics.status === "fulfilled") render(topics.value.topics);
    else {
      clear(list, errorPanel(describeError(topics.reason), "topics"));
      throw topics.reason;
    }
  }

  return { el, refresh, intervalMs: 5000 };
}

// ---------------------------------------------------------------- one topic
const topicRates = new Map(); // topic name -> Samples, kept across visits

function ratesOf(name) {
  if (!topicRates.has(name)) topicRates.set(name, new Samples(300));
  return topicRates.get(name);
}

function offsetRange(first, next) {
  return next > first ? `${fmt.int(first)} \u2013 ${fmt.int(next - 1)}` : `none (next ${fmt.int(next)})`;
}

// The compacted view (GetTopicStats' `compaction`): what read_compacted readers get below its horizon.
function compactionText(s) {
  const c = s.has_compaction ? s.compaction : null;
  if (!c) return "never compacted";
  return (
    `below offset ${fmt.int(c.horizon)}: ${fmt.int(c.keys)} key(s), ${fmt.bytes(c.bytes)} \u00b7 ` +
    `${fmt.ago(c.compacted_at_ms)} (${fmt.time(c.compacted_at_ms)}), in ${c.stored_in}`
  );
}

export function logFacts(s) {
  const reliable = s.dispatch_strategy === "reliable";
  if (!reliable) {
    return [
      ["Next offset", fmt.int(s.next_offset), "next_offset"],
      ["Messages in since loaded here", fmt.int(s.msgs_in_total), "msgs_in_total"],
    ];
  }
  return [
    ["Offsets kept", offsetRange(s.first_offset, s.next_offset), "offsets"],
    ["Next offset", fmt.int(s.next_offset), "next_offset"],
    ["Local WAL", `${offsetRange(s.local_first_offset, s.next_offset)} \u00b7 ${fmt.bytes(s.wal_bytes)} in ${fmt.int(s.wal_segments)} segment(s)`, "local"],
    [
      "Uploaded to object storage",
      s.has_uploaded ? offsetRange(s.uploaded_first_offset, s.uploaded_next_offset) : "nothing yet (or no object storage)",
      "uploaded",
    ],
    [
      "Object storage here",
      s.has_uploaded
        ? `${fmt.int(s.remote_entries)} message(s) read back (${fmt.int(s.remote_errors)} failed reads) \u00b7 ` +
          `retention deleted ${fmt.int(s.retention_deleted_segments)} segment(s), ${fmt.bytes(s.retention_deleted_bytes)}`
        : "\u2013",
      "object_storage",
    ],
    ["Compaction", compactionText(s), "compaction"],
    ["Durability", s.durability || "\u2013", "durability"],
    ["Log writer", s.log_writer ? `broker ${s.log_writer}, epoch ${fmt.int(s.log_epoch)}, from offset ${fmt.int(s.log_start_offset)}` : "\u2013", "writer"],
    ["Offsets reserved up to", s.reserved_to ? fmt.int(s.reserved_to) : "\u2013", "reserved_to"],
    ["Messages in since loaded here", fmt.int(s.msgs_in_total), "msgs_in_total"],
  ];
}

export function topicPage({ params, refreshSoon }) {
  const name = `/${params.join("/")}`;
  const samples = ratesOf(name);
  const chart = new LiveChart(samples, {
    series: [
      { name: "in", color: "#2563eb" },
      { name: "out", color: "#16a34a" },
    ],
    unit: " msg/s",
  });
  const head = h("div", { class: "page-head" });
  const stats = h("div", { class: "stats" });
  const body = h("div", {});
  const el = h("div", {}, head, stats, body);
  let info = null;

  async function move() {
    let brokers = [];
    try {
      brokers = (await get("/api/brokers")).brokers;
    } catch {
      brokers = [];
    }
    const targets = brokers.filter((b) => b.broker_id !== info.broker_id && b.state === "active");
    const select = h(
      "select",
      { name: "to_broker", "data-test": "move-target" },
      h("option", { value: "" }, "Best other broker (the load manager picks)"),
      targets.map((b) => h("option", { value: b.broker_id }, `Broker ${b.broker_id} (${b.topic_count} topics)`)),
    );
    await action(
      {
        title: `Move ${name}?`,
        body: [
          h("p", {}, `The topic is on broker ${info.broker_id || "(none)"}. The load manager hands it over; its producers and consumers reconnect to the new owner.`),
          h("label", {}, "Move to", select),
        ],
        confirmLabel: "Move topic",
      },
      () => post(`/api/topics/${topicPath(name)}/move`, { to_broker: select.value }),
      (r) => `Move of ${r.name} requested: from broker ${r.from_broker} to ${r.to_broker || "the best other broker"}. The owner changes once the load manager has moved it.`,
    );
    refreshSoon();
  }

  function renderHead(t) {
    clear(
      head,
      h(
        "div",
        {},
        h("div", { class: "crumbs" }, h("a", { href: "#/topics" }, "Topics"), " / "),
        h("h1", { "data-test": "topic-name" }, name),
        h(
          "div",
          { class: "badges" },
          t.dispatch_strategy === "reliable" ? badge("reliable", "badge-reliable") : badge("non-reliable", "badge-plain"),
          t.durability ? badge(t.durability, "badge-plain") : null,
          t.partitions ? badge(`${t.partitions} partitions`, "badge-plain") : null,
        ),
      ),
      t.partitions ? null : h("button", { class: "primary", type: "button", "data-action": "move", onclick: move }, "Move topic\u2026"),
    );
  }

  function renderPartitioned(t) {
    clear(stats);
    clear(
      body,
      card(
        "Partitions",
        table(
          [{ label: "Partition" }, { label: "Owner broker" }, { label: "Subscriptions" }],
          t.partition_topics.map((p) => ({
            attrs: { "data-topic": p.name },
            cells: [topicLink(p.name), cell(p.broker_id || "unassigned", { "data-field": "broker_id" }), p.subscriptions.join(", ") || "none"],
          })),
        ),
      ),
    );
  }

  function renderStats(t, s, statsErr) {
    const subs = s ? s.subscriptions : [];
    const out = subs.reduce((n, x) => n + x.msg_rate_out, 0);
    const backlog = subs.reduce((n, x) => n + x.backlog, 0);
    clear(
      stats,
      stat("Owner broker", t.broker_id || "unassigned", s && s.log_epoch ? `ownership epoch ${fmt.int(s.log_epoch)}` : "", { "data-stat": "owner" }),
      stat("Messages in", s ? fmt.rate(s.msg_rate_in) : "\u2013", s ? `${fmt.bytes(s.bytes_rate_in)}/s` : "per second", { "data-stat": "msg_rate_in" }),
      stat("Messages out", s ? fmt.rate(out) : "\u2013", "per second, all subscriptions", { "data-stat": "msg_rate_out" }),
      stat("Backlog", s ? fmt.int(backlog) : "\u2013", `${subs.length} subscription(s)`, { "data-stat": "backlog" }),
      stat("Producers", s ? fmt.int(s.producers) : "\u2013", `${subs.reduce((n, x) => n + x.consumers, 0)} consumer(s)`, { "data-stat": "producers" }),
    );
    if (s) samples.push(Date.now(), [s.msg_rate_in, out]);
    const sections = [card("Message rates (per second)", chart.el)];
    if (statsErr) sections.push(errorPanel(statsErr, "live figures from the owning broker"));
    if (s && s.state) sections.push(h("div", { class: "panel-warning", role: "status" }, `Not serving: ${s.state}`));
    if (s) {
      sections.push(
        h(
          "div",
          { class: "columns" },
          card("Log", keyValues(logFacts(s), { "data-test": "log" })),
          card(
            "Topic",
            keyValues([
              ["Created", fmt.time(t.created_at_ms)],
              ["Retention", t.dispatch_strategy === "reliable" ? retention(t) : "\u2013"],
              ["Subscriptions", t.subscriptions.length ? t.subscriptions.join(", ") : "none"],
            ]),
          ),
        ),
      );
      sections.push(card("Subscriptions", subscriptionsTable(subs)));
      if (s.accepted_gaps.length) sections.push(card("Accepted gaps (offsets given up)", gapsTable(s.accepted_gaps)));
    }
    clear(body, sections);
    chart.draw();
  }

  async function refresh() {
    try {
      info = await get(`/api/topics/${topicPath(name)}`);
    } catch (exc) {
      clear(head, h("div", {}, h("div", { class: "crumbs" }, h("a", { href: "#/topics" }, "Topics"), " / "), h("h1", {}, name)));
      clear(stats);
      clear(body, errorPanel(describeError(exc), "the topic"));
      throw exc;
    }
    renderHead(info);
    if (info.partitions) return renderPartitioned(info);
    let s = null;
    let statsErr = null;
    try {
      s = await get(`/api/topics/${topicPath(name)}/stats`);
    } catch (exc) {
      statsErr = describeError(exc);
      if (statsErr.refused) throw exc;
    }
    renderStats(info, s, statsErr);
    return null;
  }

  return { el, refresh, intervalMs: 2000, destroy: () => chart.destroy() };
}

function retention(t) {
  const parts = [];
  if (t.retention_time_s) parts.push(fmt.seconds(t.retention_time_s));
  if (t.retention_size_bytes) parts.push(fmt.bytes(t.retention_size_bytes));
  return parts.length ? parts.join(", ") : "until acknowledged";
}

function subscriptionsTable(subs) {
  return table(
    [
      { label: "Subscription" },
      { label: "Type" },
      { label: "Consumers", cls: "num" },
      { label: "Backlog", cls: "num" },
      { label: "Cursor", cls: "num" },
      { label: "Unacked", cls: "num" },
      { label: "Delivered", cls: "num" },
      { label: "Redelivered", cls: "num" },
      { label: "Dead-lettered", cls: "num" },
      { label: "Msg/s out", cls: "num" },
      { label: "Read error" },
    ],
    subs.map((x) => ({
      attrs: { "data-subscription": x.name },
      cells: [
        cell(h("strong", {}, x.name), { "data-field": "name" }),
        x.type,
        cell(fmt.int(x.consumers), { "data-field": "consumers" }),
        cell(fmt.int(x.backlog), { "data-field": "backlog" }),
        cell(x.has_cursor ? fmt.int(x.cursor) : "\u2013", { "data-field": "cursor" }),
        fmt.int(x.unacked_in_flight),
        fmt.int(x.delivered_total),
        fmt.int(x.redelivered_total),
        fmt.int(x.dead_lettered_total),
        cell(fmt.rate(x.msg_rate_out), { "data-field": "msg_rate_out" }),
        x.read_error ? h("span", { class: "error-text" }, x.read_error) : h("span", { class: "muted" }, "none"),
      ],
    })),
    { empty: "No subscriptions.", attrs: { "data-test": "subscriptions" } },
  );
}

function gapsTable(gaps) {
  return table(
    [{ label: "Offsets" }, { label: "Writer" }, { label: "Decided by" }, { label: "When" }, { label: "Reason" }],
    gaps.map((g) => [offsetRange(g.start_offset, g.next_offset), g.writer, g.decided_by, fmt.time(g.at_ms), g.reason]),
  );
}
