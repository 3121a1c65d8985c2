"""A Spark DataFrame into a topic as Arrow, read back as a DataFrame and a Ray Dataset,
copied to another topic by Ray Data, and a stream published exactly once per
micro-batch. (The README's "Spark and Ray Data" block is this script.)

Run: pip install -e ".[spark]" && python examples/spark_bridge.py
(RAY_ADDRESS=... to use a running cluster)
"""

import tempfile
import uuid

import raytopic as rt
import raytopic.data
import raytopic.spark

spark = raytopic.spark.init_spark("orders", num_executors=1, executor_cores=2)
name = f"orders-{uuid.uuid4().hex[:8]}"
topic = rt.create_topic(name, channels=2, groups=["billing"])
other_topic = rt.create_topic(f"{name}-copy", channels=2)
try:
    orders_df = spark.range(1000).selectExpr(
        "id AS order", "id % 100 AS customer", "id * 0.5 AS amount"
    )
    summary = raytopic.spark.publish_dataframe(topic, orders_df, key="customer")
    print("published", summary.rows, "rows:", summary.rows_per_channel)

    df = raytopic.spark.read_topic(spark, topic, start="earliest")  # a Spark DataFrame
    df.groupBy("channel").count().orderBy("channel").show()
    ds = raytopic.data.read_topic(topic, group="billing")  # a Ray Dataset
    copied = raytopic.data.write_topic(ds, other_topic, key="customer")
    print("copied", copied.rows, "rows through Ray Data")

    with tempfile.TemporaryDirectory() as path:  # the stream's input and checkpoint
        orders_df.write.parquet(f"{path}/in")
        stream_df = spark.readStream.schema(orders_df.schema).parquet(f"{path}/in")
        sink = raytopic.spark.sink(topic, key="customer")  # each micro-batch exactly once
        query = (
            stream_df.writeStream.foreachBatch(sink)
            .option("checkpointLocation", f"{path}/checkpoint")
            .trigger(availableNow=True)  # what is there now, then stop
            .start()
        )
        query.awaitTermination()
    print("streamed", sink.last_summary.rows, "rows")
finally:
    raytopic.spark.stop_spark()
    topic.destroy()
    other_topic.destroy()
