"""A reliable topic's history, read by Spark straight from object storage, written to Parquet.

No broker is involved: the driver lists the topic's uploaded WAL objects (here through their
descriptors in etcd; leave --etcd out to list the object store instead), the executors fetch
and decode them.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python examples/history_to_parquet.py \\
        --topic /default/orders --objects data/objects --etcd 127.0.0.1:2379 \\
        --since 2026-11-01T00:00:00Z --out /tmp/orders.parquet

    # MinIO / S3 instead of a local directory:
    #   --s3-bucket danube --s3-endpoint http://127.0.0.1:9000   (credentials: AWS_* variables)

The Parquet data set is partitioned by topic partition and day; each row keeps the offset,
publish time, key, attributes, the payload and, for text payloads, the payload as a string.
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from danube_spark import register


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--topic", required=True, help="/namespace/topic (a partitioned topic: all partitions)")
    p.add_argument("--objects", default="data/objects", help="local object store directory")
    p.add_argument("--s3-bucket", help="read from this S3/MinIO bucket instead of --objects")
    p.add_argument("--s3-endpoint", help="http(s)://host:port of MinIO (unset: AWS)")
    p.add_argument("--prefix", default="", help="the object store prefix the cluster uses (e.g. danube/)")
    p.add_argument("--etcd", help="etcd endpoints host:port[,...]: list descriptors there")
    p.add_argument("--cluster", default="danube", help="the cluster name in etcd")
    p.add_argument("--since", help="publish time from (epoch ms or ISO-8601)")
    p.add_argument("--until", help="publish time before (epoch ms or ISO-8601)")
    p.add_argument("--out", required=True, help="Parquet output directory")
    p.add_argument("--master", default="local[*]")
    args = p.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors need pyarrow and danube_spark
    spark = SparkSession.builder.master(args.master).appName("danube-history-to-parquet").getOrCreate()
    register(spark)

    reader = spark.read.format("danube-history").option("object_store.prefix", args.prefix)
    if args.s3_bucket:
        reader = reader.option("object_store.backend", "s3").option("object_store.s3.bucket", args.s3_bucket)
        if args.s3_endpoint:
            reader = reader.option("object_store.s3.endpoint_url", args.s3_endpoint)
            reader = reader.option("object_store.s3.path_style", "true")
    else:
        reader = reader.option("object_store.local_dir", args.objects)
    if args.etcd:
        reader = reader.option("etcd.endpoints", args.etcd).option("etcd.cluster", args.cluster)
    if args.since:
        reader = reader.option("start_time", args.since)
    if args.until:
        reader = reader.option("end_time", args.until)

    history = reader.load(args.topic)
    out = history.select(
        F.coalesce("partition", F.lit(0)).alias("partition"),
        "offset",
        "publish_time",
        F.to_date("publish_time").alias("day"),
        "key",
        "attributes",
        F.col("payload").cast("string").alias("payload_text"),
        "payload",
        "producer_name",
    )
    out.write.mode("overwrite").partitionBy("partition", "day").parquet(args.out)
    written = spark.read.parquet(args.out)
    print(f"{written.count()} messages of {args.topic} written to {args.out}")
    written.groupBy("partition").agg(F.count("*").alias("messages"), F.max("offset").alias("last")).show()
    spark.stop()


if __name__ == "__main__":
    main()
