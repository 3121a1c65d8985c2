"""Group view versions, published where members can read them cheaply.

A member must learn of a change to its group (a rebalance, a reset, its own
timeout) at the latest on its next receive, but asking the coordinator actor
on every receive costs an actor round trip. So the coordinator also writes
each group's version to Ray's GCS key-value store, and a member's receive
reads that one key (served by the GCS itself, about half the cost of an
actor call and far steadier under load); only when the version moved does
the member ask the coordinator for its view.

``ray.experimental.internal_kv`` is Ray's internal store (Ray's own libraries
use it); raytopic pins its Ray version, so this stays in one small module.
"""

from __future__ import annotations

from ray.experimental import internal_kv

__all__ = ["forget_group", "publish_version", "read_version"]

_KV_NAMESPACE = "raytopic"


def _key(namespace: str, topic: str, group: str) -> bytes:
    return f"group-version/{namespace}/{topic}/{group}".encode()


def publish_version(namespace: str, topic: str, group: str, version: int) -> None:
    """Record ``version`` as the group's current view version."""
    internal_kv._internal_kv_put(
        _key(namespace, topic, group), str(version).encode(), namespace=_KV_NAMESPACE
    )


def read_version(namespace: str, topic: str, group: str) -> int | None:
    """The group's current view version, or None if none was published."""
    value = internal_kv._internal_kv_get(_key(namespace, topic, group), namespace=_KV_NAMESPACE)
    return None if value is None else int(value)


def forget_group(namespace: str, topic: str, group: str) -> None:
    """Remove a destroyed group's version."""
    internal_kv._internal_kv_del(_key(namespace, topic, group), namespace=_KV_NAMESPACE)
