"""Ray Data in and out of topics: the public path of :mod:`raytopic.bridge.data`
(see it for the details).

Example:
    >>> import ray, raytopic.data
    >>> summary = raytopic.data.write_topic(ray.data.range(1000), topic, key="id")
"""

from raytopic.bridge.data import TopicDatasink, TopicDatasource, read_topic, write_topic

__all__ = ["TopicDatasink", "TopicDatasource", "read_topic", "write_topic"]
