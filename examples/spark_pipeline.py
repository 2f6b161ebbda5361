"""A kfs pipeline on Spark: JSON order lines from topic ``orders`` (appended through the mount),
totals per user computed with Spark SQL, written back as Kafka records (key = user) to topic
``totals``.

    .venv/bin/python examples/spark_pipeline.py BACKING_DIR [--master local[*]]

The same job on a cluster, with BACKING_DIR on storage every executor mounts at the same path
and kfs installed in a Python at the same path on every node (docs/spark.md, "On a cluster"):

    export PYSPARK_PYTHON=/opt/kfs/.venv/bin/python
    /opt/kfs/.venv/bin/spark-submit --master spark://HOST:7077 examples/spark_pipeline.py /shared/kfs
"""

import argparse
import os
import sys

from pyspark.sql import SparkSession

import kfs.spark


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backing_dir")
    parser.add_argument("--master", default=None, help="Spark master (default: spark-submit's, else local[*])")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers use this interpreter

    builder = SparkSession.builder.appName("kfs-pipeline")
    if args.master or "SPARK_MASTER" not in os.environ and not os.environ.get("SPARK_ENV_LOADED"):
        builder = builder.master(args.master or "local[*]")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    kfs.spark.register(spark)

    orders = (spark.read.format("kfs").option("path", args.backing_dir)
              .option("subscribe", "orders").load())
    orders.selectExpr("cast(value as string) as json").createOrReplaceTempView("orders")
    totals = spark.sql("""
        select get_json_object(json, '$.user') as key,
               to_json(named_struct('user', get_json_object(json, '$.user'),
                                    'orders', count(*),
                                    'total', sum(cast(get_json_object(json, '$.amount') as double))))
                   as value
        from orders group by 1 order by 1""")
    (totals.write.format("kfs").option("path", args.backing_dir).option("topic", "totals")
     .mode("append").save())
    print(f"wrote {totals.count()} totals to topic totals")
    spark.stop()


if __name__ == "__main__":
    main()
