"""A streaming count from one topic into another: orders in, running counts per item out.

Reads JSON orders (``{"item": "pen", "qty": 2}``) from a reliable topic with Spark Structured
Streaming, counts orders and quantities per item, and after each micro-batch writes every
item's counts to another topic as JSON, keyed by item (output mode ``complete``: sinks of the
Python Data Source API take ``append`` and ``complete``, not ``update``). The
checkpoint makes it restartable: stop it, start it again, and it continues where it stopped;
counts are written once per micro-batch even when one is replayed.

    # a cluster: .venv/bin/danube-local up
    danube-admin topics create /default/orders --dispatch-strategy reliable
    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python examples/streaming_order_count.py \\
        --service-url http://127.0.0.1:6650 --checkpoint /tmp/order-count-ckpt
    # elsewhere:
    danube-cli produce -t /default/orders --reliable -m '{"item": "pen", "qty": 2}' -c 5
    danube-cli consume -t /default/order-counts -m watch --sub-type exclusive

``--once`` processes what is in the topic now and exits (Trigger.AvailableNow).
"""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--service-url", default="http://127.0.0.1:6650")
    ap.add_argument("--source", default="/default/orders")
    ap.add_argument("--sink", default="/default/order-counts")
    ap.add_argument("--checkpoint", required=True, help="a directory Spark keeps the query's progress in")
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--once", action="store_true", help="process what is there now, then stop")
    args = ap.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from danube_spark import register

    spark = (
        SparkSession.builder.master(args.master)
        .appName("order-count")
        # The count's state and output: a few partitions are plenty here (Spark's default is 200;
        # a restarted query keeps the number its checkpoint was made with).
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    register(spark)

    orders = (
        spark.readStream.format("danube")
        .option("service_url", args.service_url)
        .option("topics", args.source)
        .option("startingOffsets", "earliest")
        .option("maxMessagesPerTrigger", 10_000)
        .load()
        .select(F.from_json(F.col("payload").cast("string"), "item string, qty int").alias("o"))
        .select("o.*")
    )
    counts = orders.groupBy("item").agg(F.count("*").alias("orders"), F.sum("qty").alias("qty"))
    writer = (
        counts.select(
            F.col("item").alias("key"), F.to_json(F.struct("item", "orders", "qty")).alias("payload")
        )
        .writeStream.format("danube")
        .outputMode("complete")
        .option("service_url", args.service_url)
        .option("topic", args.sink)
        # After a shuffle the rows' order within a task is not fixed: number them by content.
        .option("sortRowsForReplay", "true")
        .option("checkpointLocation", args.checkpoint)
    )
    query = (writer.trigger(availableNow=True) if args.once else writer).start()
    query.awaitTermination()


if __name__ == "__main__":
    main()
