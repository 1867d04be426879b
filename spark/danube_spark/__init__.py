"""Danube topics in Spark: data sources for PySpark's Python Data Source API.

``register(spark)`` makes them known to a SparkSession:

- ``danube-history`` (:mod:`danube_spark.history`): batch reads of a reliable topic's history
  straight from object storage.
- ``danube`` (:mod:`danube_spark.source`, :mod:`danube_spark.sink`): topics as a Structured
  Streaming source, and as a streaming and batch sink.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register every Danube data source with ``spark`` (a SparkSession)."""
    from danube_spark.history import HistoryDataSource
    from danube_spark.source import DanubeDataSource

    spark.dataSource.register(HistoryDataSource)
    spark.dataSource.register(DanubeDataSource)
