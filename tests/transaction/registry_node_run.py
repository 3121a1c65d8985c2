"""The transaction registry's state when the node holding its state topic's channel is
lost (run by test_transaction_faults.py in a process and a Ray cluster of its own).

A head and a worker node of 1 CPU each. The registry keeps its state on a compacted
topic: in the store ``rt.transactions(store=)`` named (``registry`` "store": here a
directory every node sees, as a shared mount would be), or (``registry`` "none") in
the Ray session's directory, on the disk of the node its channel runs on. Here every
node is one machine, so that path would survive the node: what the channel wrote
there is removed with the node, as a lost machine's disk goes. An older incarnation
of an id, fenced by a newer one, then stages at a topic it never used and commits;
the newer commits. Prints one JSON line: what each got.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import sys

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# See a node die in about 2 s instead of 16. Before Ray is imported: set after it,
# the head never started under pytest -n 2 (3 of 3 runs).
os.environ.setdefault("RAY_health_check_period_ms", "500")
os.environ.setdefault("RAY_health_check_timeout_ms", "500")
os.environ.setdefault("RAY_health_check_failure_threshold", "3")

import ray
import ray._private.state as ray_state

import raytopic as rt
from raytopic.client.control_log import control_store_of
from raytopic.core.naming import channel_actor_name, transaction_registry_name
from raytopic.transaction.registry import TRANSACTION_STATE

from tests.own_ray import start_cluster


def _node_and_pid(name: str, namespace: str) -> tuple[str, int]:
    actor_id = ray.get_actor(name, namespace=namespace)._actor_id.hex()
    actor = ray_state.actors(actor_id=actor_id)
    return actor["Address"]["NodeID"], actor["Pid"]


def _outcome(holder: rt.Transactions, topic: rt.Topic, value: str) -> str:
    try:
        transaction = holder.begin()
        transaction.publish(topic, value)
        transaction.commit()
    except rt.TopicError as error:
        return type(error).__name__
    return "committed"


def main(store: str, registry: str) -> None:
    """``store``: the topics' (and, ``registry`` "store", the registry's) directory."""
    state_store = os.path.join(store, "registry") if registry == "store" else None
    cluster, (worker,) = start_cluster("registry-node", log_to_driver=False)
    try:
        # A namespace of each try has its own registry and state topic: try until the
        # state topic's channel is on the worker (SPREAD is best effort).
        for attempt in range(8):
            namespace = f"registry-node-{attempt}"
            older = rt.transactions("stage", namespace=namespace, store=state_store)
            used = rt.create_topic("used", channels=1, store=store, namespace=namespace)
            transaction = older.begin()
            transaction.publish(used, "older")
            transaction.commit()
            # fences `older`
            newer = rt.transactions("stage", namespace=namespace, store=state_store)
            channel_node, _ = _node_and_pid(channel_actor_name(TRANSACTION_STATE, 0), namespace)
            if channel_node == worker.node_id:
                break
        else:
            raise RuntimeError("the state topic's channel never landed on the worker")
        registry_node, registry_pid = _node_and_pid(transaction_registry_name(), namespace)
        session = ray.get_runtime_context().get_session_name()
        cluster.remove_node(worker)
        # What the channel wrote went with its node's disk.
        for written in glob.glob(os.path.join(control_store_of(session), namespace)):
            shutil.rmtree(written)
        if registry_node != worker.node_id:
            os.kill(registry_pid, signal.SIGKILL)  # it restarts, and reads its state back
        fresh = rt.create_topic("fresh", channels=1, store=store, namespace=namespace)
        result = {
            "older": _outcome(older, fresh, "older"),
            "newer": _outcome(newer, fresh, "newer"),
        }
        with fresh.subscriber(start="earliest", complete_on_empty=True) as reader:
            result["fresh"] = [element.value for element in reader]
        print(json.dumps(result))
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
