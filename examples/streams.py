"""A topic as a stream of Ray Datasets: micro-batches over fixed position ranges,
each written to parquet under its batch id (a sink that overwrites by batch id),
with a driver that stops mid-batch and a new stream that hands the same batch out
again. (The docs' Streams guide, docs/guides/streams.md, shows this script.)

Run: python examples/streams.py   (RAY_ADDRESS=... to use a running cluster)
"""

import tempfile
import uuid

import pyarrow.parquet as pq
import ray

import raytopic as rt
import raytopic.data

ray.init()
topic = rt.create_topic(f"clicks-{uuid.uuid4().hex[:8]}", channels=2)
try:
    with topic.publisher() as publisher:
        for n in range(1000):
            publisher.publish({"user": f"u{n % 10}", "n": n})

    with tempfile.TemporaryDirectory() as out:

        def write(batch: raytopic.data.MicroBatch) -> None:
            # Overwrite by batch id: a batch handed out again replaces its first output.
            batch.dataset.write_parquet(f"{out}/batch={batch.batch_id}", mode="overwrite")

        for batch in raytopic.data.stream(topic, group="etl", max_rows_per_batch=300):
            write(batch)  # advancing the iterator commits the batch before
            if batch.batch_id == 1:
                break  # as if the driver died here: batch 1 is written, not committed

        # A new stream on the group (the restarted driver) fences the old one and
        # hands batch 1 out again first: same id, same ranges, same rows.
        with raytopic.data.stream(topic, group="etl", max_rows_per_batch=300) as stream:
            for batch in stream:
                print("batch", batch.batch_id, "ranges", batch.ranges, "rows", batch.rows)
                write(batch)

        written = pq.read_table(out).column("n").to_pylist()
        assert sorted(written) == list(range(1000))
        print("every click written exactly once:", len(written), "rows")
finally:
    topic.destroy()
