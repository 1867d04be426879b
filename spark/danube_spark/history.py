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
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from danube_spark.history_options import HistoryOptions, parse_options
from danube_spark.history_plan import ReadTask, plan_history
from danube_spark.history_rows import SCHEMA, read_task


class TaskPartition(InputPartition):
    """One Spark input partition: a :class:`ReadTask` (picklable)."""

    def __init__(self, task: ReadTask) -> None:
        super().__init__(task)
        self.task = task


class HistoryReader(DataSourceReader):
    def __init__(self, opts: HistoryOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        return [TaskPartition(t) for t in plan_history(self.opts).tasks]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        if not isinstance(partition, TaskPartition):
            return iter(())  # nothing to read: Spark hands one empty partition instead of none
        return read_task(partition.task, self.opts)


class HistoryDataSource(DataSource):
    """The ``danube-history`` batch source (options: :mod:`danube_spark.history_options`)."""

    @classmethod
    def name(cls) -> str:
        return "danube-history"

    def schema(self) -> StructType:
        return SCHEMA

    def reader(self, schema: Any) -> DataSourceReader:
        return HistoryReader(parse_options(dict(self.options)))
