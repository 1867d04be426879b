"""``spark.read.format("danube-history")``: a reliable topic's history, read by Spark executors
straight from object storage (no broker; etcd only on the driver, and only if asked).

::

    from danube_spark import register
    register(spark)
    df = (
        spark.read.format("danube-history")
        .option("topic", "/default/orders")
        .option("object_store.backend", "s3")
        .option("object_store.s3.bucket", "danube")
        .option("object_store.s3.endpoint_url", "http://minio:9000")
        .option("object_store.s3.path_style", "true")
        .option("start_time", "2026-11-01T00:00:00Z")
        .load()
    )

The driver lists the topic's objects and plans the tasks (:mod:`.history_plan`); each executor
fetches and decodes its objects (:mod:`.history_rows`). Options: :mod:`.history_options`.
With ``decode=true`` the driver also resolves the topic's schema in the registry (once, when the
DataFrame is made) and the rows get ``value`` and ``decode_error`` (:mod:`.decoding`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from danube_spark.decoding import DecodeSpec, fetch_spec
from danube_spark.history_options import HistoryOptions, parse_options
from danube_spark.history_plan import ReadTask, plan_history
from danube_spark.history_rows import SCHEMA, read_task


class TaskPartition(InputPartition):
    """One Spark input partition: a :class:`ReadTask` (picklable)."""

    def __init__(self, task: ReadTask) -> None:
        super().__init__(task)
        self.task = task


class HistoryReader(DataSourceReader):
    def __init__(self, opts: HistoryOptions, decode: DecodeSpec | None = None) -> None:
        self.opts = opts
        self.decode = decode

    def partitions(self) -> Sequence[InputPartition]:
        return [TaskPartition(t) for t in plan_history(self.opts).tasks]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, TaskPartition):
            return iter(())  # nothing to read: Spark hands one empty partition instead of none
        return read_task(partition.task, self.opts, self.decode)


class HistoryDataSource(DataSource):
    """The ``danube-history`` batch source (options: :mod:`danube_spark.history_options`)."""

    @classmethod
    def name(cls) -> str:
        return "danube-history"

    def _spec(self, opts: HistoryOptions) -> DecodeSpec | None:
        """The decode spec, resolved once (Spark pickles this instance after ``schema()``)."""
        if not opts.decode or opts.schema_registry_url is None:
            return None
        spec: DecodeSpec | None = getattr(self, "_decode_spec", None)
        if spec is None:
            spec = fetch_spec(
                opts.schema_registry_url, [str(opts.topic)], opts.schema_subject, opts.schema_version
            )
            self._decode_spec = spec
        return spec

    def schema(self) -> StructType:
        spec = self._spec(parse_options(dict(self.options)))
        return SCHEMA if spec is None else StructType([*SCHEMA.fields, *spec.fields()])

    def reader(self, schema: Any) -> DataSourceReader:
        opts = parse_options(dict(self.options))
        return HistoryReader(opts, self._spec(opts))
