"""``format("danube")``: Danube topics as a Structured Streaming source (and, through
:mod:`danube_spark.sink`, as a streaming and batch sink).

    spark.readStream.format("danube")
        .option("service_url", "http://127.0.0.1:6650")
        .option("topics", "/default/orders")          # or .option("pattern", "/default/orders-.*")
        .option("startingOffsets", "earliest")        # latest (default), or JSON per partition
        .option("maxMessagesPerTrigger", 10000)
        .load()

How a micro-batch is made:

- The source's offset is ``{partition topic: next offset}`` (:mod:`danube_spark.stream_offsets`);
  Spark checkpoints it. ``latestOffset`` asks the brokers for every partition's next offset (a
  Reader attached at ``latest`` is told it, then closed; at most every
  ``offsetsProbeIntervalMs``) and caps the batch at ``maxMessagesPerTrigger``.
- Each partition's range ``[start, end)`` is one Spark task, which reads it with a Reader started
  at ``start`` and stopped at ``end`` (:class:`danube_spark.topic_io.RangeRead`): the same range
  always gives the same rows, so a batch replayed after a failure or a restart gives what the
  first attempt gave. No subscription is created: nothing is stored at the broker, and retention
  does not wait for the query (offsets cut before it reads them fail it with DataLoss, or are
  skipped with a warning with ``failOnDataLoss=false``).
- Topics appearing later (a pattern's new matches, a listed topic created after the start) are
  read from their first kept offset.

Only reliable topics can be read (a non-reliable topic keeps nothing to read by offset).

With ``decode=true`` (and optionally ``schemaSubject``, ``schemaVersion``) the driver resolves the
schema in the registry when the DataFrame is made, and rows get ``value`` and ``decode_error``
(:mod:`danube_spark.decoding`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    StructType,
)

from danube_common.topic_name import TopicName
from danube_sdk.types import Message
from danube_spark import stream_offsets as so
from danube_spark.decoding import DecodeSpec, PayloadDecoder, fetch_spec
from danube_spark.history_rows import MESSAGE_FIELDS
from danube_spark.stream_options import SourceOptions
from danube_spark.topic_io import LoopClient, partitions_of, probe, read_range

log = logging.getLogger(__name__)


def _schema() -> StructType:
    return StructType(MESSAGE_FIELDS)


#: The rows of the streaming source (the columns of ``danube-history`` they share have the
#: same names and types).
SCHEMA = _schema()


class RangePartition(InputPartition):
    """One Spark task: offsets ``[start, end)`` of one partition topic."""

    def __init__(self, topic: str, base: str, number: int | None, start: int, end: int) -> None:
        super().__init__((topic, start, end))
        self.topic = topic
        self.base = base
        self.number = number
        self.start = start
        self.end = end


def arrow_schema(decode: DecodeSpec | None = None) -> Any:
    """:data:`SCHEMA` (with ``decode``'s columns at the end) as the Arrow schema Spark expects of
    a Python data source's batches."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = SCHEMA if decode is None else StructType([*SCHEMA.fields, *decode.fields()])
    return to_arrow_schema(schema, timezone="UTC")


def record_batch(
    msgs: list[Message[Any]],
    base: str,
    number: int | None,
    schema: Any,
    decoder: PayloadDecoder | None = None,
) -> Any:
    """The rows of ``msgs`` as one ``pyarrow.RecordBatch`` (built by columns: far cheaper than
    handing Spark a tuple per row)."""
    import pyarrow as pa

    n = len(msgs)
    cols: list[list[Any]] = [[] for _ in range(8)]
    key, attrs, payload, producer, sid, sver, seq, when = cols
    for m in msgs:
        key.append(m.key)
        attrs.append(list(m.properties.items()))
        payload.append(m.payload)
        producer.append(m.producer_name or None)
        sid.append(m.schema_id)
        sver.append(m.schema_version)
        seq.append(m.sequence_id or None)
        when.append(m.publish_time_ms * 1000)  # microseconds
    f = schema.field
    arrays = [
        pa.array([base] * n, type=f(0).type),
        pa.array([number] * n, type=f(1).type),
        pa.array([m.offset for m in msgs], type=f(2).type),
        pa.array(when, type=pa.int64()).cast(f(3).type),
        pa.array(key, type=f(4).type),
        pa.array(attrs, type=f(5).type),
        pa.array(payload, type=f(6).type),
        pa.array(producer, type=f(7).type),
        pa.array(sid, type=f(8).type),
        pa.array(sver, type=f(9).type),
        pa.array(seq, type=f(10).type),
        pa.array([m.batch_index for m in msgs], type=f(11).type),
    ]
    if decoder is not None:
        for m in msgs:
            decoder.add(m.payload, m.schema_id, m.schema_version)
        arrays += decoder.take(f(len(arrays)), f(len(arrays) + 1))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


class DanubeStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The driver's half (offsets, planning) and, pickled, the executors' (``read``)."""

    def __init__(self, opts: SourceOptions, decode: DecodeSpec | None = None) -> None:
        self.opts = opts
        self.decode = decode
        self._lc: LoopClient | None = None
        #: {partition topic: its topic}, as last listed.
        self._topics: dict[str, str] = {}
        self._latest: so.Offsets | None = None
        self._probed_at = 0.0
        #: Trigger.AvailableNow: never read past these ends.
        self._target: so.Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Executors get the options only (the driver's client stays on the driver).
        return {"opts": self.opts, "decode": self.decode}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["opts"], state.get("decode"))  # type: ignore[misc]

    # ------------------------------------------------------------------ driver

    def _client(self) -> LoopClient:
        if self._lc is None:
            self._lc = LoopClient(self.opts.service_url, token=self.opts.token)
        return self._lc

    def _list(self) -> dict[str, str]:
        lc = self._client()
        self._topics = lc.run(partitions_of(lc.client, self.opts.topics, self.opts.pattern))
        return self._topics

    def initialOffset(self) -> dict[str, int]:
        lc = self._client()
        found = self._list()
        offsets: so.Offsets = {}
        by_kind: dict[str, list[str]] = {"earliest": [], "latest": []}
        for p, of in found.items():
            where = self.opts.starting.for_partition(p, of if of != p else "")
            if isinstance(where, int):
                offsets[p] = where
            else:
                by_kind[where].append(p)
        for kind, parts in by_kind.items():
            if parts:
                offsets.update(lc.run(probe(lc.client, parts, kind)))  # type: ignore[arg-type]
        log.info("danube source starts at %s", offsets)
        return so.encode(offsets)

    def _probe_latest(self, start: so.Offsets) -> so.Offsets:
        now = time.monotonic()
        if self._latest is not None and now - self._probed_at < self.opts.offsets_probe_interval_s:
            return self._latest
        lc = self._client()
        found = self._list()
        known = [p for p in found if p in start]
        new = [p for p in found if p not in start]
        latest = lc.run(probe(lc.client, known, "latest")) if known else {}
        if new:
            # Found after the query started: read from the first offset kept (from the next
            # batch on; this batch records where they start). Their ends are not known yet:
            # the next call probes again rather than reuse these values.
            latest.update(lc.run(probe(lc.client, new, "earliest")))
            now = 0.0
        self._latest, self._probed_at = latest, now
        return latest

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        begin = so.decode(start)
        latest = self._probe_latest(begin)
        if self._target is not None:
            # Trigger.AvailableNow: up to the ends found at the start; partitions found later
            # are recorded (at their first offset) but not read.
            latest = {p: min(o, self._target.get(p, begin.get(p, o))) for p, o in latest.items()}
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return so.encode(so.limit_end(begin, latest, max_rows))

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.opts.max_messages_per_trigger
        return ReadMaxRows(n) if n is not None else ReadAllAvailable()

    def reportLatestOffset(self) -> dict[str, int] | None:
        return so.encode(self._latest) if self._latest is not None else None

    def prepareForTriggerAvailableNow(self) -> None:
        lc = self._client()
        found = self._list()
        self._target = lc.run(probe(lc.client, list(found), "latest")) if found else {}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        out: list[InputPartition] = []
        todo = so.ranges(so.decode(start), so.decode(end))
        if any(r.topic not in self._topics for r in todo):
            self._list()  # a restarted driver replaying a planned batch
        for r in todo:
            base = self._topics.get(r.topic) or str(TopicName.parse(r.topic).base)
            number = None if base == r.topic else TopicName.parse(r.topic).partition_index
            out.append(RangePartition(r.topic, base, number, r.start, r.end))
        return out

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the source holds no state at the brokers."""

    def stop(self) -> None:
        if self._lc is not None:
            self._lc.close()
            self._lc = None

    # ------------------------------------------------------------------ executors

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, RangePartition)
        opts = self.opts
        schema = arrow_schema(self.decode)
        decoder = PayloadDecoder(self.decode) if self.decode is not None else None
        return read_range(
            lambda: LoopClient(opts.service_url, token=opts.token),
            partition.topic,
            partition.start,
            partition.end,
            fail_on_data_loss=opts.fail_on_data_loss,
            read_timeout_s=opts.read_timeout_s,
            receiver_queue_size=opts.receiver_queue_size,
            to_rows=lambda msgs: record_batch(msgs, partition.base, partition.number, schema, decoder),
        )


def _get_bool(options: Any, name: str) -> bool:
    return any(
        k.lower() == name and str(v).strip().lower() in ("true", "1", "yes") for k, v in options.items()
    )


class DanubeDataSource(DataSource):
    """``format("danube")``: ``readStream`` (this module), ``writeStream`` and ``write``
    (:mod:`danube_spark.sink`)."""

    @classmethod
    def name(cls) -> str:
        return "danube"

    def _spec(self, opts: SourceOptions) -> DecodeSpec | None:
        """The decode spec, resolved once (Spark pickles this instance after ``schema()``)."""
        if not opts.decode:
            return None
        spec: DecodeSpec | None = getattr(self, "_decode_spec", None)
        if spec is None:
            spec = fetch_spec(
                opts.service_url, opts.topics, opts.schema_subject, opts.schema_version, token=opts.token
            )
            self._decode_spec = spec
        return spec

    def schema(self) -> StructType:
        if not _get_bool(self.options, "decode"):
            return SCHEMA  # also the sink's schema: no source options needed
        spec = self._spec(SourceOptions.parse(self.options))
        return SCHEMA if spec is None else StructType([*SCHEMA.fields, *spec.fields()])

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        opts = SourceOptions.parse(self.options)
        return DanubeStreamReader(opts, self._spec(opts))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from danube_spark.sink import DanubeBatchWriter

        return DanubeBatchWriter(self.options, schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from danube_spark.sink import DanubeStreamWriter

        return DanubeStreamWriter(self.options, schema)
