"""One ObjectRef for the results of several channel calls, in the input's order:
``Publisher.publish_batch``'s statuses, a bulk acknowledgement's outcomes."""

from __future__ import annotations

from typing import Any

import ray

__all__ = ["gather_in_order"]


def _in_order(layout: list[int], *parts: list[Any]) -> list[Any]:
    """Per-channel result lists back in the order of the input (``layout[i]``: the
    part item ``i`` is in)."""
    cursors = [iter(part) for part in parts]
    return [next(cursors[index]) for index in layout]


gather_in_order = ray.remote(num_cpus=0)(_in_order)
"""``_in_order`` as a task: ``gather_in_order.remote(layout, *refs)`` is one
ObjectRef for the results several channel calls return."""
