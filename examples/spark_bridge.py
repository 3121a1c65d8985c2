"""A Spark DataFrame into a topic as Arrow, read back as a DataFrame and a Ray Dataset,
copied to another topic by Ray Data, streamed out of a group as micro-batches of
DataFrames into a third topic, and a Spark stream published exactly once per
micro-batch. (The docs' Spark and Ray Data guide shows this script.)

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
totals = rt.create_topic(f"{name}-totals", channels=2)
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

    # The group "totals" as micro-batches of DataFrames; the sink publishes each batch
    # id once, so a batch handed out again after a crash is not published twice.
    publish = raytopic.spark.sink(totals, key="customer", query_id="totals")
    for batch in raytopic.spark.stream(spark, topic, group="totals", max_rows_per_batch=400):
        publish(batch.dataframe.withColumn("total", batch.dataframe.amount * 2), batch.batch_id)
    print("totals:", raytopic.data.read_topic(totals).count(), "rows from the stream")

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
    totals.destroy()
