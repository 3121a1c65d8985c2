"""Spark DataFrames in and out of topics: the public path of
:mod:`raytopic.bridge.spark` (see it for the details). Needs the ``spark`` extra.

Example:
    >>> import raytopic.spark
    >>> spark = raytopic.spark.init_spark("orders", num_executors=1, executor_cores=1)
    >>> summary = raytopic.spark.publish_dataframe(topic, orders_df, key="customer")
"""

from raytopic.bridge.spark import (
    JAVA_OPTIONS,
    JavaNotFoundError,
    StreamingSink,
    init_spark,
    prepare_java,
    publish_dataframe,
    read_topic,
    sink,
    stop_spark,
    stream,
)

__all__ = [
    "JAVA_OPTIONS",
    "JavaNotFoundError",
    "StreamingSink",
    "init_spark",
    "prepare_java",
    "publish_dataframe",
    "read_topic",
    "sink",
    "stop_spark",
    "stream",
]
