// The overview page: brokers (state, topics, rates, CPU, memory; drain / activate), the
// leader of each control-plane role, the topic count and a live plot of the cluster's msg/s.

import { LiveChart, Samples } from "./chart.js";
import { action, badge, card, cell, clear, describeError, errorPanel, fmt, get, h, post, stat, table } from "./core.js";

// Cluster msg/s in and out, kept across visits of the page (10 minutes at one sample per 2 s).
const clusterRates = new Samples(300);

export function cpuShare(b) {
  return b.has_load && b.cpu_cores ? b.cpu_usage / b.cpu_cores : null;
}

export function countTopics(topics) {
  const partitioned = topics.filter((t) => t.partitions > 0);
  return {
    topics: topics.length,
    partitioned: partitioned.length,
    partitions: partitioned.reduce((n, t) => n + t.partition_topics.length, 0),
  };
}

function stateBadge(state) {
  return badge(state, `badge-${state}`);
}

export function overviewPage({ refreshSoon }) {
  const stats = h("div", { class: "stats" });
  const chart = new LiveChart(clusterRates, {
    series: [
      { name: "in", color: "#2563eb" },
      { name: "out", color: "#16a34a" },
    ],
    unit: " msg/s",
  });
  const brokers = h("div", {});
  const leaders = h("div", {});
  const el = h(
    "div",
    {},
    h("div", { class: "page-head" }, h("h1", {}, "Cluster overview")),
    stats,
    card("Cluster throughput (messages per second)", chart.el),
    card("Brokers", brokers),
    card("Leaders", leaders),
  );

  async function changeState(b, state) {
    const draining = state === "draining";
    await action(
      {
        title: draining ? `Drain broker ${b.broker_id}?` : `Activate broker ${b.broker_id}?`,
        body: h(
          "p",
          {},
          draining
            ? `The load manager moves every topic of broker ${b.broker_id} (${b.topic_count} now) to other brokers, ` +
                "and the broker takes no new topics until it is activated again. Clients follow their topics."
            : `Broker ${b.broker_id} takes new topics again (the load manager may place topics on it).`,
        ),
        confirmLabel: draining ? "Drain broker" : "Activate broker",
        danger: draining,
      },
      () => post(`/api/brokers/${encodeURIComponent(b.broker_id)}/state`, { state }),
      (r) => `Broker ${r.broker_id} is now ${r.state}.`,
    );
    refreshSoon();
  }

  function renderBrokers(list) {
    const rows = list.map((b) => ({
      attrs: { "data-broker": b.broker_id },
      cells: [
        cell(h("strong", {}, b.broker_id), { "data-field": "broker_id" }),
        cell(b.broker_addr, { "data-field": "broker_addr", class: "mono" }),
        cell(stateBadge(b.state), { "data-field": "state" }),
        cell(fmt.int(b.topic_count), { "data-field": "topic_count" }),
        cell(b.has_load ? fmt.rate(b.msg_rate_in) : "\u2013", { "data-field": "msg_rate_in" }),
        cell(b.has_load ? fmt.rate(b.msg_rate_out) : "\u2013", { "data-field": "msg_rate_out" }),
        cell(fmt.pct(cpuShare(b)), {
          "data-field": "cpu",
          title: b.has_load ? `${b.cpu_usage.toFixed(2)} of ${b.cpu_cores} cores` : "no load report yet",
        }),
        cell(b.has_load ? fmt.bytes(b.mem_rss_bytes) : "\u2013", { "data-field": "memory" }),
        cell(b.has_load ? fmt.int(b.backlog) : "\u2013", { "data-field": "backlog" }),
        cell(b.has_load ? `${b.producers} / ${b.consumers}` : "\u2013", { "data-field": "clients" }),
        b.state === "active"
          ? h("button", { class: "small danger-ghost", type: "button", "data-action": "drain", onclick: () => changeState(b, "draining") }, "Drain")
          : h("button", { class: "small ghost", type: "button", "data-action": "activate", onclick: () => changeState(b, "active") }, "Activate"),
      ],
    }));
    clear(
      brokers,
      table(
        [
          { label: "Broker" },
          { label: "Address" },
          { label: "State" },
          { label: "Topics", cls: "num" },
          { label: "Msg/s in", cls: "num" },
          { label: "Msg/s out", cls: "num" },
          { label: "CPU", cls: "num" },
          { label: "Memory", cls: "num" },
          { label: "Backlog", cls: "num" },
          { label: "Producers / consumers", cls: "num" },
          { label: "", cls: "actions" },
        ],
        rows,
        { empty: "No broker is registered.", attrs: { "data-test": "brokers" } },
      ),
    );
  }

  function renderLeaders(list) {
    const rows = list.map((l) => ({
      attrs: { "data-role": l.role },
      cells: [
        cell(l.role, { "data-field": "role" }),
        cell(h("strong", {}, l.candidate_id), { "data-field": "candidate_id" }),
        cell(fmt.int(l.term), { "data-field": "term" }),
        cell(
          Object.entries(l.metadata || {}).map(([k, v]) => h("span", { class: "tag" }, `${k} ${v}`)),
          { class: "muted" },
        ),
      ],
    }));
    clear(
      leaders,
      table([{ label: "Role" }, { label: "Leader" }, { label: "Term", cls: "num" }, { label: "Details" }], rows, {
        empty: "No control-plane role has a leader (is the leader service running?).",
        attrs: { "data-test": "leaders" },
      }),
    );
  }

  function renderStats(brokerList, topicList) {
    const loaded = brokerList ? brokerList.filter((b) => b.has_load) : [];
    const sum = (k) => loaded.reduce((n, b) => n + b[k], 0);
    const active = brokerList ? brokerList.filter((b) => b.state === "active").length : null;
    const counts = topicList ? countTopics(topicList) : null;
    clear(
      stats,
      stat("Brokers", brokerList ? fmt.int(brokerList.length) : "\u2013", brokerList ? `${active} active` : "", { "data-stat": "brokers" }),
      stat(
        "Topics",
        counts ? fmt.int(counts.topics) : "\u2013",
        counts && counts.partitioned ? `${counts.partitioned} partitioned, ${counts.partitions} partitions` : "",
        { "data-stat": "topics" },
      ),
      stat("Messages in", brokerList ? fmt.rate(sum("msg_rate_in")) : "\u2013", "per second", { "data-stat": "msg_rate_in" }),
      stat("Messages out", brokerList ? fmt.rate(sum("msg_rate_out")) : "\u2013", "per second", { "data-stat": "msg_rate_out" }),
      stat("Backlog", brokerList ? fmt.int(sum("backlog")) : "\u2013", "unacknowledged messages", { "data-stat": "backlog" }),
    );
    if (brokerList) clusterRates.push(Date.now(), [sum("msg_rate_in"), sum("msg_rate_out")]);
  }

  async function refresh() {
    const [b, l, t] = await Promise.allSettled([get("/api/brokers"), get("/api/leaders"), get("/api/topics")]);
    const brokerList = b.status === "fulfilled" ? b.value.brokers : null;
    const topicList = t.status === "fulfilled" ? t.value.topics : null;
    renderStats(brokerList, topicList);
    chart.draw();
    if (brokerList) renderBrokers(brokerList);
    else clear(brokers, errorPanel(describeError(b.reason), "brokers"));
    if (l.status === "fulfilled") renderLeaders(l.value.leaders);
    else clear(leaders, errorPanel(describeError(l.reason), "leaders"));
    const failed = [b, l, t].find((r) => r.status === "rejected");
    if (failed) throw failed.reason;
  }

  return { el, refresh, intervalMs: 2000, destroy: () => chart.destroy() };
}
