"""Ray Data in and out of topics, topics as streams of Ray Datasets, and a topic's
table: the public path of :mod:`raytopic.bridge.data` and
:mod:`raytopic.bridge.table_data` (see them for the details).

Example:
    >>> import ray, raytopic.data
    >>> summary = raytopic.data.write_topic(ray.data.range(1000), topic, key="id")
"""

from raytopic.bridge.data import (
    MicroBatch,
    Stream,
    TopicDatasink,
    TopicDatasource,
    read_topic,
    stream,
    write_topic,
)
from raytopic.bridge.table_data import read_table

__all__ = [
    "MicroBatch",
    "Stream",
    "TopicDatasink",
    "TopicDatasource",
    "read_table",
    "read_topic",
    "stream",
    "write_topic",
]
