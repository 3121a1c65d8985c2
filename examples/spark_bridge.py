"""A Spark DataFrame into a topic as Arrow, read back as a DataFrame and a Ray Dataset.

Run: pip install -e ".[spark]" && python examples/spark_bridge.py
"""

import os
import uuid

import ray

import raytopic as rt
import raytopic.data
import raytopic.spark

raytopic.spark.prepare_java()  # before Ray starts: Spark's executors need Java workers
ray.init(address=os.environ.get("RAY_ADDRESS", "local"))
spark = raytopic.spark.init_spark("example-spark", num_executors=1, executor_cores=1)
topic = rt.create_topic(f"example-spark-{uuid.uuid4().hex[:6]}", channels=4, groups=["billing"])
try:
    from pyspark.sql import functions as F

    orders = spark.range(10_000).select(
        F.col("id").alias("order"),
        (F.col("id") % 100).alias("customer"),
        (F.col("id") * 0.5).alias("amount"),
    )
    summary = raytopic.spark.publish_dataframe(topic, orders, key="customer")
    print(f"published {summary.rows} rows: {summary.rows_per_channel}")

    back = raytopic.spark.read_topic(spark, topic)  # columns + channel, position, timestamp
    back.groupBy("channel").count().orderBy("channel").show()
    print("as a Ray Dataset:", raytopic.data.read_topic(topic).count(), "rows")
    with topic.subscriber(group="billing") as member:
        print("a subscriber sees dicts:", ray.get(member.receive()).value)
finally:
    raytopic.spark.stop_spark()
    topic.destroy()
