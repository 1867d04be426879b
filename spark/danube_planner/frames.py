"""The aggregation as Spark DataFrame transforms: the steps of :mod:`danube_planner.aggregate`,
one function each (DataFrame in, DataFrame out), and :func:`aggregate_spark` chaining them and
collecting the result into the same :class:`~danube_planner.model.Aggregates`.

Reports arrive as JSON lines (current ones from etcd, through the driver; history from the object
store, fetched by the executors (:mod:`danube_planner.history_fetch`) or by the driver: no s3a)
and are parsed by Spark (``from_json``); topic rows are the compact
``topic_fields`` + ``topics`` arrays of ``LoadReport.to_json()``, read by column name so a
broker that orders or extends its columns differently still parses.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Mapping, Sequence
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from danube_common.load import MSG_COST_BYTES, TOPIC_FIELDS
from danube_common.load_score import DIMENSIONS, FLOORS, ScoreWeights
from danube_planner import spans
from danube_planner.history_fetch import LINES_SCHEMA, HistorySource, history_frame
from danube_planner.model import (
    AggregateParams,
    Aggregates,
    BrokerAgg,
    NamespaceAgg,
    OwnerRow,
    PlannerInputs,
    TopicAgg,
)

log = logging.getLogger(__name__)

RATES = ("msg_rate_in", "msg_rate_out", "byte_rate_in", "byte_rate_out")

REPORT_SCHEMA = T.StructType(
    [
        T.StructField("broker_id", T.StringType()),
        T.StructField("at_ms", T.LongType()),
        T.StructField("cpu_usage", T.DoubleType()),
        T.StructField("cpu_cores", T.LongType()),
        T.StructField("mem_rss_bytes", T.LongType()),
        T.StructField("mem_total_bytes", T.LongType()),
        *(T.StructField(name, T.DoubleType()) for name in RATES),
        T.StructField("backlog", T.LongType()),
        T.StructField("topic_fields", T.ArrayType(T.StringType())),
        # Mixed JSON values (names, numbers, booleans) read as their text, cast per column below.
        T.StructField("topics", T.ArrayType(T.ArrayType(T.StringType()))),
    ]
)


# ---------------------------------------------------------------- inputs
#: Most bytes of report lines one task carries from the driver (Spark warns above 1000 KiB).
TASK_BYTES = 512 * 1024


def pack(rows: Sequence[tuple[str, bool]], limit: int = TASK_BYTES) -> list[list[tuple[str, bool]]]:
    """Consecutive rows in chunks of at most ``limit`` bytes of lines (a longer line alone)."""
    chunks: list[list[tuple[str, bool]]] = []
    size = limit + 1
    for row in rows:
        n = len(row[0])
        if size + n > limit:
            chunks.append([])
            size = 0
        chunks[-1].append(row)
        size += n
    return chunks


def _rows_of(chunk: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    return chunk


def lines_frame(spark: SparkSession, current: Sequence[str], history: Sequence[str]) -> DataFrame:
    """``(line, current)`` rows from the driver. Past :data:`TASK_BYTES` of lines they travel in
    one chunk per task (the current reports of hundreds of brokers x thousands of topics are
    megabytes: one task each would carry them whole)."""
    rows = [(line, True) for line in current] + [(line, False) for line in history]
    chunks = pack(rows, TASK_BYTES)
    if len(chunks) <= 1:
        return spark.createDataFrame(rows, LINES_SCHEMA)
    rdd = spark.sparkContext.parallelize(chunks, len(chunks)).flatMap(_rows_of)
    return spark.createDataFrame(rdd, LINES_SCHEMA)


def owners_frame(spark: SparkSession, owners: Mapping[str, OwnerRow]) -> DataFrame:
    return spark.createDataFrame([(t, o.broker_id) for t, o in owners.items()], "topic string, owner string")


def states_frame(spark: SparkSession, states: Mapping[str, str]) -> DataFrame:
    return spark.createDataFrame(list(states.items()), "broker_id string, state string")


# ---------------------------------------------------------------- transforms
def parse_reports(lines: DataFrame) -> DataFrame:
    """``(line, current)`` -> one row per report, with the defaults ``LoadReport.from_json`` uses."""
    r = lines.select(F.from_json("line", REPORT_SCHEMA).alias("r"), "current").select("r.*", "current")
    return r.filter(F.col("broker_id").isNotNull()).select(
        "broker_id",
        F.coalesce("at_ms", F.lit(0)).alias("at_ms"),
        F.coalesce("cpu_usage", F.lit(0.0)).alias("cpu_usage"),
        F.coalesce("cpu_cores", F.lit(1)).alias("cpu_cores"),
        F.coalesce("mem_rss_bytes", F.lit(0)).alias("mem_rss_bytes"),
        F.coalesce("mem_total_bytes", F.lit(0)).alias("mem_total_bytes"),
        *(F.coalesce(name, F.lit(0.0)).alias(name) for name in RATES),
        F.coalesce("backlog", F.lit(0)).alias("backlog"),
        F.coalesce("topic_fields", F.array(*(F.lit(f) for f in TOPIC_FIELDS))).alias("topic_fields"),
        "topics",
        "current",
    )


def window_samples(parsed: DataFrame, from_ms: int, to_ms: int) -> DataFrame:
    """Current reports and the history ones in ``[from_ms, to_ms)``, one per (broker, at_ms)
    (the current copy wins)."""
    inside = parsed.filter(F.col("current") | ((F.col("at_ms") >= from_ms) & (F.col("at_ms") < to_ms)))
    rank = Window.partitionBy("broker_id", "at_ms").orderBy(F.col("current").desc())
    return inside.withColumn("_n", F.row_number().over(rank)).filter(F.col("_n") == 1).drop("_n", "current")


def _field(name: str) -> Column:
    pos = F.array_position("topic_fields", name).cast("int")
    return F.when(pos > 0, F.try_element_at("row", pos))


def topic_rows(reports: DataFrame) -> DataFrame:
    """One row per (report, topic): broker_id, at_ms, topic, rates, backlog."""
    rows = reports.select("broker_id", "at_ms", "topic_fields", F.explode("topics").alias("row"))
    return rows.select(
        "broker_id",
        "at_ms",
        _field("topic").alias("topic"),
        *(F.coalesce(_field(n).try_cast("double"), F.lit(0.0)).alias(n) for n in RATES),
        F.coalesce(_field("backlog").try_cast("double"), F.lit(0.0)).alias("backlog"),
    ).filter(F.col("topic").isNotNull())


def topic_stats(rows: DataFrame) -> DataFrame:
    """Per topic: mean rates over its rows; backlog of its newest row."""
    return rows.groupBy("topic").agg(
        *(F.avg(n).alias(n) for n in RATES),
        F.max_by("backlog", F.struct("at_ms", "broker_id")).alias("backlog"),
    )


def listed_by(current_rows: DataFrame) -> DataFrame:
    """Topic -> the broker whose current report lists it (the newest, then the largest id)."""
    return current_rows.groupBy("topic").agg(
        F.max_by("broker_id", F.struct("at_ms", "broker_id")).alias("listed_by")
    )


def remainders(current: DataFrame, current_rows: DataFrame) -> DataFrame:
    """Per reporting broker: its totals minus its listed rows (floored at 0)."""
    listed = current_rows.groupBy("broker_id").agg(
        *(F.sum(n).alias(f"_l_{n}") for n in RATES), F.sum("backlog").alias("_l_backlog")
    )
    joined = current.join(listed, "broker_id", "left")
    return joined.select(
        "broker_id",
        *(
            F.greatest(F.col(n) - F.coalesce(F.col(f"_l_{n}"), F.lit(0.0)), F.lit(0.0)).alias(f"r_{n}")
            for n in RATES
        ),
        F.greatest(F.col("backlog") - F.coalesce(F.col("_l_backlog"), F.lit(0.0)), F.lit(0.0)).alias(
            "r_backlog"
        ),
    )


def topic_table(owners: DataFrame, listed: DataFrame, stats: DataFrame, rest: DataFrame) -> DataFrame:
    """Every topic with its owner and rates (listed: window means; unlisted: an even share of
    the owner's remainder, ``estimated``)."""
    universe = owners.join(listed, "topic", "full_outer").select(
        "topic",
        F.coalesce("owner", "listed_by").alias("broker_id"),
        F.col("listed_by").isNull().alias("estimated"),
    )
    known = (
        universe.filter(~F.col("estimated"))
        .join(stats, "topic")
        .select("topic", "broker_id", *RATES, "backlog", "estimated")
    )
    unlisted = universe.filter(F.col("estimated"))
    counts = unlisted.groupBy("broker_id").agg(F.count("*").alias("_n"))
    guessed = (
        unlisted.join(counts, "broker_id")
        .join(rest, "broker_id", "left")
        .select(
            "topic",
            "broker_id",
            *((F.coalesce(F.col(f"r_{n}"), F.lit(0.0)) / F.col("_n")).alias(n) for n in RATES),
            (F.coalesce(F.col("r_backlog"), F.lit(0.0)) / F.col("_n")).alias("backlog"),
            "estimated",
        )
    )
    return known.unionByName(guessed)


def broker_table(topics: DataFrame, samples: DataFrame, states: DataFrame, current: DataFrame) -> DataFrame:
    """Every known broker: state, topics owned, summed rates, mean CPU and memory shares."""
    ids = (
        states.select("broker_id")
        .union(current.select("broker_id"))
        .union(topics.select("broker_id"))
        .distinct()
    )
    sums = topics.groupBy("broker_id").agg(
        F.count("*").alias("topics"), *(F.sum(n).alias(n) for n in RATES), F.sum("backlog").alias("backlog")
    )
    usage = samples.groupBy("broker_id").agg(
        F.avg(F.col("cpu_usage") / F.greatest(F.col("cpu_cores"), F.lit(1))).alias("cpu"),
        F.avg(
            F.when(F.col("mem_total_bytes") > 0, F.col("mem_rss_bytes") / F.col("mem_total_bytes")).otherwise(
                0.0
            )
        ).alias("memory"),
    )
    return (
        ids.join(states, "broker_id", "left")
        .join(sums, "broker_id", "left")
        .join(usage, "broker_id", "left")
        .select(
            "broker_id",
            F.coalesce("state", F.lit("unregistered")).alias("state"),
            F.coalesce("topics", F.lit(0)).alias("topics"),
            *(F.coalesce(n, F.lit(0.0)).alias(n) for n in RATES),
            F.coalesce("backlog", F.lit(0.0)).alias("backlog"),
            F.coalesce("cpu", F.lit(0.0)).alias("cpu"),
            F.coalesce("memory", F.lit(0.0)).alias("memory"),
        )
    )


def _dimension_columns() -> dict[str, Column]:
    """Each load-score dimension (:mod:`danube_common.load_score`) as a column of a brokers frame."""
    return {
        "topics": F.col("topics"),
        "msgs": F.col("msg_rate_in") + F.col("msg_rate_out"),
        "bytes": F.col("byte_rate_in") + F.col("byte_rate_out"),
        "cpu": F.col("cpu"),
        "memory": F.col("memory"),
    }


def score_means(brokers: DataFrame) -> dict[str, float]:
    """The floored mean of each score dimension over the active brokers (one small job)."""
    cols = _dimension_columns()
    row = (
        brokers.filter(F.col("state") == "active")
        .agg(*(F.avg(cols[d]).alias(d) for d in DIMENSIONS))
        .collect()[0]
    )
    return {d: max(float(row[d] or 0.0), FLOORS[d]) for d in DIMENSIONS}


def with_scores(brokers: DataFrame, means: Mapping[str, float], w: ScoreWeights) -> DataFrame:
    """The shared load score, column-wise."""
    cols = _dimension_columns()
    terms = [F.lit(getattr(w, d)) * cols[d] / means[d] for d in DIMENSIONS]
    return brokers.withColumn("score", reduce(operator.add, terms))


def topic_loads(
    topics: DataFrame, brokers: DataFrame, means: Mapping[str, float], w: ScoreWeights
) -> DataFrame:
    """Each topic's share of its broker's score (:mod:`danube_planner.model`)."""
    msgs = F.col("msg_rate_in") + F.col("msg_rate_out")
    bytes_ = F.col("byte_rate_in") + F.col("byte_rate_out")
    weighted = topics.withColumn("_w", bytes_ + F.lit(MSG_COST_BYTES) * msgs)
    totals = weighted.groupBy("broker_id").agg(F.sum("_w").alias("_bw"))
    b = brokers.select(
        "broker_id",
        F.col("topics").alias("_bt"),
        (
            F.lit(w.cpu) * F.col("cpu") / means["cpu"] + F.lit(w.memory) * F.col("memory") / means["memory"]
        ).alias("_extra"),
    )
    part = F.when(F.col("_bw") > 0, F.col("_w") / F.col("_bw")).otherwise(1.0 / F.col("_bt"))
    load = (
        F.lit(w.topics) / means["topics"]
        + F.lit(w.msgs) * msgs / means["msgs"]
        + F.lit(w.bytes) * bytes_ / means["bytes"]
        + F.col("_extra") * part
    )
    parts = F.split("topic", "/")
    namespace = F.when(F.size(parts) >= 3, F.element_at(parts, 2)).otherwise(F.lit(""))
    return (
        weighted.join(totals, "broker_id")
        .join(b, "broker_id")
        .select(
            "topic",
            namespace.alias("namespace"),
            "broker_id",
            *RATES,
            "backlog",
            "estimated",
            load.alias("load"),
        )
    )


def namespace_table(loads: DataFrame, limit: int) -> DataFrame:
    return (
        loads.groupBy("namespace")
        .agg(
            F.count("*").alias("topics"),
            F.countDistinct("broker_id").alias("brokers"),
            *(F.sum(n).alias(n) for n in RATES),
            F.sum("backlog").alias("backlog"),
            F.sum("load").alias("load"),
        )
        .orderBy(F.col("load").desc(), F.col("namespace").asc())
        .limit(limit)
    )


def hot_topics(loads: DataFrame, limit: int) -> DataFrame:
    return loads.orderBy(F.col("load").desc(), F.col("topic").asc()).limit(limit)


def imbalance(brokers: DataFrame) -> float:
    """CV of the active brokers' scores (0 with fewer than two, or a mean <= 0)."""
    row = (
        brokers.filter(F.col("state") == "active")
        .agg(F.stddev_pop("score").alias("sd"), F.avg("score").alias("mean"), F.count("*").alias("n"))
        .collect()[0]
    )
    if row["n"] < 2 or not row["mean"] or row["mean"] <= 0:
        return 0.0
    return float(row["sd"]) / float(row["mean"])


# ---------------------------------------------------------------- the whole chain
def input_lines(
    spark: SparkSession, inp: PlannerInputs, history: HistorySource | None
) -> tuple[DataFrame, Any]:
    """``(line, current)`` rows of the inputs, and the accumulator of malformed history lines
    the executors skipped (None when the driver passed lines). ``history_keys`` are fetched by
    the executors (:mod:`danube_planner.history_fetch`), ``history_lines`` come from the driver."""
    lines = lines_frame(spark, inp.current_lines, inp.history_lines)
    if not inp.history_keys:
        return lines, None
    if history is None:
        raise ValueError(
            f"{len(inp.history_keys)} load history object(s) to read on the executors, but no "
            "HistorySource says where they are"
        )
    fetched, bad = history_frame(spark, inp.history_keys, history)
    return lines.unionByName(fetched), bad


def aggregate_spark(
    spark: SparkSession,
    inp: PlannerInputs,
    params: AggregateParams = AggregateParams(),
    history: HistorySource | None = None,
) -> Aggregates:
    """:func:`danube_planner.aggregate.aggregate`, on Spark. History objects listed in
    ``inp.history_keys`` are read by the executors from ``history``'s object store."""
    lines, bad = input_lines(spark, inp, history)
    parsed = parse_reports(lines).cache()
    cached: list[DataFrame] = [parsed]
    try:
        current = parsed.filter(F.col("current")).drop("current")
        samples = window_samples(parsed, inp.window_from_ms, inp.window_to_ms).cache()
        cached.append(samples)
        current_rows = topic_rows(current)
        topics = topic_table(
            owners_frame(spark, inp.owners),
            listed_by(current_rows),
            topic_stats(topic_rows(samples)),
            remainders(current, current_rows),
        ).cache()
        cached.append(topics)
        states = states_frame(spark, inp.broker_states)
        brokers = broker_table(topics, samples, states, current).cache()
        cached.append(brokers)
        # Each action below runs Spark jobs: a span each (children of "compute report").
        with spans.stage("spark score means"):
            means = score_means(brokers)
        scored = with_scores(brokers, means, params.weights).cache()
        cached.append(scored)
        loads = topic_loads(topics, scored, means, params.weights).cache()
        cached.append(loads)
        with spans.stage("spark collect brokers"):
            broker_rows = [_broker(r) for r in scored.orderBy("broker_id").collect()]
        with spans.stage("spark collect topics"):
            topic_rows_ = [_topic(r) for r in loads.orderBy("topic").collect()]
        with spans.stage("spark collect namespaces"):
            namespace_rows = [_namespace(r) for r in namespace_table(loads, params.max_namespaces).collect()]
        with spans.stage("spark collect hot topics"):
            hot = [_topic(r) for r in hot_topics(loads, params.hot_topics).collect()]
        with spans.stage("spark imbalance"):
            cv = imbalance(scored)
        with spans.stage("spark count samples"):
            n_samples = samples.count()
        if bad is not None and bad.value:
            log.warning("the executors skipped %d malformed load history line(s)", bad.value)
        return Aggregates(
            brokers=broker_rows,
            topics=topic_rows_,
            namespaces=namespace_rows,
            hot_topics=hot,
            means=means,
            cv=cv,
            samples=n_samples,
        )
    finally:
        for df in cached:
            df.unpersist()


def _broker(r: Any) -> BrokerAgg:
    return BrokerAgg(
        broker_id=r["broker_id"],
        state=r["state"],
        topics=int(r["topics"]),
        msg_rate_in=float(r["msg_rate_in"]),
        msg_rate_out=float(r["msg_rate_out"]),
        byte_rate_in=float(r["byte_rate_in"]),
        byte_rate_out=float(r["byte_rate_out"]),
        backlog=float(r["backlog"]),
        cpu=float(r["cpu"]),
        memory=float(r["memory"]),
        score=float(r["score"]),
    )


def _topic(r: Any) -> TopicAgg:
    return TopicAgg(
        topic=r["topic"],
        namespace=r["namespace"],
        broker_id=r["broker_id"],
        msg_rate_in=float(r["msg_rate_in"]),
        msg_rate_out=float(r["msg_rate_out"]),
        byte_rate_in=float(r["byte_rate_in"]),
        byte_rate_out=float(r["byte_rate_out"]),
        backlog=float(r["backlog"]),
        estimated=bool(r["estimated"]),
        load=float(r["load"]),
    )


def _namespace(r: Any) -> NamespaceAgg:
    return NamespaceAgg(
        namespace=r["namespace"],
        topics=int(r["topics"]),
        brokers=int(r["brokers"]),
        msg_rate_in=float(r["msg_rate_in"]),
        msg_rate_out=float(r["msg_rate_out"]),
        byte_rate_in=float(r["byte_rate_in"]),
        byte_rate_out=float(r["byte_rate_out"]),
        backlog=float(r["backlog"]),
        load=float(r["load"]),
    )
