"""Ray Data in and out of topics, and topics as streams of Ray Datasets: the public
path of :mod:`raytopic.bridge.data` (see it for the details).

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

__all__ = [
    "MicroBatch",
    "Stream",
    "TopicDatasink",
    "TopicDatasource",
    "read_topic",
    "stream",
    "write_topic",
]
