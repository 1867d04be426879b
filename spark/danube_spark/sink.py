"""``df.write.format("danube")`` and ``df.writeStream.format("danube")``: rows to a topic.

    df.selectExpr("CAST(id AS STRING) AS key", "to_json(struct(*)) AS payload")
      .writeStream.format("danube")
      .option("service_url", "http://127.0.0.1:6650")
      .option("topic", "/default/order-counts")
      .option("checkpointLocation", "/tmp/ckpt")
      .start()

Columns: ``payload`` (binary or string, required), ``key`` (string: routes the row to a
partition by its hash, as any Danube producer does; null: round robin), ``attributes``
(map<string,string>). Other columns are refused (select what you want to send).

No duplicates when Spark retries: every Spark task writes through one idempotent producer whose
name and sequence ids are derived from where the rows come from, not from the attempt:

- streaming: producer ``{producerName}-{query id}-{spark partition}`` (the query id survives
  restarts from the checkpoint) and sequence id ``batch id * 2**32 + row position + 1``;
- batch: producer ``{producerName}-{job id}-{spark partition}`` (the job id is drawn once on the
  driver, so task retries share it) and sequence id ``row position + 1``.

A retried task or a replayed micro-batch sends the same rows with the same ids under the same
name, so the broker drops every copy it already stored (reliable topics; explicit sequence ids,
``Producer.send_async(sequence_id=)``). This holds when a replay yields the same rows in the
same order in each Spark partition: plans that only map and filter what the ``danube`` source
read (it replays exactly) do; after a shuffle (aggregations, joins) the order within a
partition can differ, and ``sortRowsForReplay=true`` numbers the rows in content order instead
(a task's rows are then held in memory, and the order messages are sent in is that order).
A message over the broker's size limit fails the task (explicitly numbered messages are not
chunked).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, MapType, StringType, StructType

from danube_common.errors import ConfigError
from danube_sdk import DanubeClient, DispatchStrategy, MessageId
from danube_spark.stream_options import SinkOptions
from danube_spark.topic_io import run_async

log = logging.getLogger(__name__)

#: Rows per Spark partition and micro-batch must stay below this (sequence ids per batch).
BATCH_ID_SHIFT = 32
#: Spark's local properties naming the streaming query and micro-batch of a task.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


def check_columns(schema: StructType) -> None:
    """Refuse a DataFrame the sink cannot write, saying what it takes."""
    what = "payload (binary or string, required), key (string), attributes (map<string,string>)"
    names = {f.name.lower(): f for f in schema.fields}
    extra = sorted(set(names) - {"payload", "key", "attributes"})
    if "payload" not in names or extra:
        raise ConfigError(
            f"the danube sink writes the columns {what}; got {schema.simpleString()}: select them, "
            "e.g. df.selectExpr('to_json(struct(*)) AS payload')"
        )
    if not isinstance(names["payload"].dataType, BinaryType | StringType):
        raise ConfigError(
            f"column payload must be binary or string, not {names['payload'].dataType.simpleString()}"
        )
    if "key" in names and not isinstance(names["key"].dataType, StringType):
        raise ConfigError(f"column key must be a string, not {names['key'].dataType.simpleString()}")
    if "attributes" in names:
        t = names["attributes"].dataType
        if not (
            isinstance(t, MapType)
            and isinstance(t.keyType, StringType)
            and isinstance(t.valueType, StringType)
        ):
            raise ConfigError(f"column attributes must be map<string,string>, not {t.simpleString()}")


@dataclass
class WriteResult(WriterCommitMessage):
    """What one task wrote: its producer and the rows acknowledged (stored, or dropped by the
    broker as copies of rows a failed attempt had stored)."""

    producer: str
    rows: int


#: One message to send: payload, key, attributes.
Out = tuple[bytes, str | None, dict[str, str] | None]


def messages(batches: Iterator[Any]) -> Iterator[Out]:
    """The messages of Arrow record batches with the sink's columns (names in any case)."""
    for batch in batches:
        cols = {name.lower(): batch.column(i) for i, name in enumerate(batch.schema.names)}
        n = batch.num_rows
        payloads = cols["payload"].to_pylist()
        keys = cols["key"].to_pylist() if "key" in cols else [None] * n
        attrs = cols["attributes"].to_pylist() if "attributes" in cols else [None] * n
        for i in range(n):
            payload = payloads[i]
            if payload is None:
                raise ConfigError("a row has a null payload: every message needs one (filter them out)")
            if isinstance(payload, str):
                payload = payload.encode("utf-8")
            a = attrs[i]
            yield (payload, keys[i], dict(a) if a else None)


async def _send(
    opts: SinkOptions, producer_name: str, first_sequence: int, rows: Iterator[Out]
) -> WriteResult:
    client = DanubeClient(opts.service_url, token=opts.token)
    try:
        producer = await client.create_producer(
            opts.topic,
            producer_name=producer_name,
            dispatch_strategy=DispatchStrategy.RELIABLE if opts.reliable else DispatchStrategy.NON_RELIABLE,
            batching_max_messages=opts.batching_max_messages,
            enable_chunking=False,
        )
        futs: list[asyncio.Future[MessageId]] = []
        for i, (payload, key, attrs) in enumerate(rows):
            if i >= 1 << BATCH_ID_SHIFT:
                raise ConfigError(f"task {producer_name} has more than 2**32 rows: repartition the DataFrame")
            futs.append(
                await producer.send_async(payload, key=key, properties=attrs, sequence_id=first_sequence + i)
            )
        ids = await asyncio.gather(*futs)
        await producer.close()
        return WriteResult(producer_name, len(ids))
    finally:
        await client.close()


def _content(m: Out) -> tuple[bytes, str, list[tuple[str, str]]]:
    payload, key, attrs = m
    return (payload, key or "", sorted((attrs or {}).items()))


def write_rows(
    opts: SinkOptions, producer_name: str, first_sequence: int, rows: Iterator[Out]
) -> WriteResult:
    """Send ``rows`` through one idempotent producer, numbered from ``first_sequence``; return
    once every row is acknowledged (stored, or dropped as a copy of a stored one). With
    ``sortRowsForReplay`` the rows are numbered in content order (held in memory), so an
    attempt that meets them in another order numbers them the same."""
    if opts.sort_rows_for_replay:
        rows = iter(sorted(rows, key=_content))
    rows = iter(rows)
    first = next(rows, None)
    if first is None:  # an empty task (most of a shuffle's partitions): no producer at all
        return WriteResult(producer_name, 0)
    return run_async(_send(opts, producer_name, first_sequence, itertools.chain([first], rows)))


class DanubeBatchWriter(DataSourceArrowWriter):
    """``df.write.format("danube")`` (append; ``overwrite`` means nothing to a topic)."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        check_columns(schema)
        self.opts = SinkOptions.parse(options)
        self.job_id = uuid.uuid4().hex[:12]

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        ctx = TaskContext.get()
        part = ctx.partitionId() if ctx is not None else 0
        name = f"{self.opts.producer_name or 'spark'}-{self.job_id}-{part}"
        return write_rows(self.opts, name, 1, messages(iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, WriteResult))
        log.info("danube sink: job %s wrote %d rows to %s", self.job_id, rows, self.opts.topic)


class DanubeStreamWriter(DataSourceStreamArrowWriter):
    """``df.writeStream.format("danube")``: each micro-batch's rows, once each at the broker."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        check_columns(schema)
        self.opts = SinkOptions.parse(options)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        ctx = TaskContext.get()
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY) if ctx is not None else None
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY) if ctx is not None else None
        if ctx is None or not query_id or batch_id is None:
            raise ConfigError(
                "the danube stream writer runs inside a streaming query's task: Spark did not say which "
                f"query and micro-batch this is (local properties {QUERY_ID_PROPERTY}, {BATCH_ID_PROPERTY})"
            )
        name = f"{self.opts.producer_name or 'spark'}-{query_id}-{ctx.partitionId()}"
        return write_rows(self.opts, name, (int(batch_id) << BATCH_ID_SHIFT) + 1, messages(iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        rows = sum(m.rows for m in messages if isinstance(m, WriteResult))
        log.info("danube sink: micro-batch %d wrote %d rows to %s", batchId, rows, self.opts.topic)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning(
            "danube sink: micro-batch %d of %s aborted; what it sent stays, and its replay is deduplicated",
            batchId,
            self.opts.topic,
        )
