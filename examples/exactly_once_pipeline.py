"""Exactly once through crashes: a worker actor doubles each input in a transaction
that also commits the input; the driver SIGKILLs it twice, Ray restarts it, and every
input still appears in the sink exactly once (Ray reports each kill: "A worker died
or was killed...").

Run: python examples/exactly_once_pipeline.py
"""

import collections
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid

import ray

import raytopic as rt

INPUTS = 1000


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class Doubler:
    """Reads the source in a group, one transaction per batch. Ray runs ``__init__``
    again after a crash: the new incarnation fences the old one's open transaction."""

    def __init__(self, source: rt.Topic, sink: rt.Topic, transactional_id: str) -> None:
        self.txs = rt.transactions(transactional_id, timeout=10.0)
        # A short heartbeat timeout: a killed member's channels move on after 2 s.
        self.member = source.subscriber(group="doublers", timeout=2.0)
        self.sink = sink
        self.error: str | None = None
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        try:
            self._loop()
        except Exception as error:
            self.error = repr(error)

    def _loop(self) -> None:
        for batch in self.member.iter_batches(100):
            try:
                with self.txs.begin() as tx:
                    outputs = [{"input": e.value, "doubled": 2 * e.value} for e in batch]
                    tx.publish_batch(self.sink, outputs)  # staged: invisible until commit
                    time.sleep(0.05)  # the rest of the work (a kill lands here, mostly)
                    tx.commit_consumed(batch)  # the outputs and the input commit: one step
            except rt.TransactionFencedError:
                return  # a newer incarnation took over
            except rt.TransactionAbortedError:
                continue  # nothing took effect: the inputs are delivered again

    def pid(self) -> int:
        return os.getpid()

    def failure(self) -> str | None:
        return self.error


ray.init(address=os.environ.get("RAY_ADDRESS", "local"))
name = f"example-exactly-once-{uuid.uuid4().hex[:6]}"
store = tempfile.mkdtemp(prefix="raytopic-example-")
source = rt.create_topic(f"{name}-in", channels=2, groups=["doublers"], store=store)
sink = rt.create_topic(f"{name}-out", channels=2, store=store)
worker = None
try:
    with source.publisher() as publisher:
        publisher.publish_batch(list(range(INPUTS)))
    started = time.monotonic()
    worker = Doubler.remote(source, sink, f"exactly-once-doubler-{name}")

    def committed() -> int:
        return INPUTS - source.describe().groups["doublers"].lag

    def in_flight() -> int:
        """Open transactions at the source and the sink."""
        channels = source.describe().channels + sink.describe().channels
        return sum(len(channel.transactions) for channel in channels)

    for kill_at in (INPUTS // 4, INPUTS // 2):
        while committed() < kill_at:
            time.sleep(0.02)
        os.kill(ray.get(worker.pid.remote()), signal.SIGKILL)
        staged = sum(t["staged"] for c in sink.describe().channels for t in c.transactions)
        print(f"killed the worker: {committed()} inputs committed, {staged} outputs staged")

    # Done when every input is committed and no transaction is open (none can land now).
    while committed() < INPUTS or in_flight():
        if time.monotonic() - started > 120:
            failure = ray.get(worker.failure.remote())
            sys.exit(f"stuck: {committed()} of {INPUTS} inputs committed (worker: {failure})")
        time.sleep(0.1)
    print(f"all {INPUTS} inputs committed in {time.monotonic() - started:.1f} s")

    with sink.subscriber(start="earliest", complete_on_empty=True) as reader:
        outputs = [element.value for batch in reader.iter_batches() for element in batch]
    counts = collections.Counter(output["input"] for output in outputs)
    missing = [n for n in range(INPUTS) if n not in counts]
    duplicated = sorted(n for n, count in counts.items() if count > 1)
    wrong = [o for o in outputs if o["doubled"] != 2 * o["input"]]
    print(f"sink: {len(outputs)} outputs, {len(missing)} missing, {len(duplicated)} duplicated")
    if missing or duplicated or wrong:
        sys.exit(
            f"not exactly once: missing {missing[:10]}, duplicated {duplicated[:10]}, "
            f"{len(wrong)} wrong"
        )
    print("every input appears in the sink exactly once")
finally:
    if worker is not None:
        ray.kill(worker, no_restart=True)
    source.destroy()
    sink.destroy()
    shutil.rmtree(store, ignore_errors=True)
