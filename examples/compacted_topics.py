"""A compacted topic of prices: compaction leaves each key's latest value at its
position (gaps where older ones were), and describe() shows each channel's passes;
then the topic read as a table: every key's latest value, kept live in a view, with
deletes that remove keys and reach listeners as None; and the same table as a Ray
Dataset. (The docs' compacted topics guide shows this script.)

Run: python examples/compacted_topics.py   (RAY_ADDRESS=... to use a running cluster)
"""

import tempfile
import time
import uuid

import ray

import raytopic as rt
import raytopic.data

ray.init()
with tempfile.TemporaryDirectory() as store:
    prices = rt.create_topic(
        f"prices-{uuid.uuid4().hex[:8]}",
        channels=4,
        store=store,
        compaction=rt.Compaction(max_lag_s=1),  # every element compacted within ~1 s
    )
    try:
        with prices.publisher() as publisher:
            for version in range(3):  # three prices of each sku: the last one counts
                for sku in ("a1", "b7", "c3"):
                    publisher.publish({"sku": sku, "eur": 3.0 + version}, key=sku)
            publisher.delete("b7")  # a delete: b7 is no entry of the table any more

        def compacted() -> bool:  # each channel's last pass covered all it holds
            return all(c.compaction["point"] > c.tail for c in prices.describe().channels if c.size)

        while not compacted():
            time.sleep(0.1)
        for c in prices.describe().channels:
            if c.size:
                last = c.compaction["last_run"]
                print(f"channel {c.channel}: positions {c.head}..{c.tail}, {c.size} left,",
                      f"{c.compaction['live_keys']} live key(s), {last['removed']} removed,",
                      f"{last['bytes_before']} -> {last['bytes_after']} bytes")  # fmt: skip
        with prices.subscriber(start="earliest", complete_on_empty=True) as reader:
            left = sorted((e.key, e.sequence, e.value) for e in reader)
        print("after compaction (key, position, value):", left)  # gaps at the old versions
        assert [(key, value) for key, _, value in left] == [
            ("a1", {"sku": "a1", "eur": 5.0}),
            ("b7", None),  # a delete stays tombstone_retention_s (a day by default)
            ("c3", {"sku": "c3", "eur": 5.0}),
        ]

        with prices.table() as view:  # whole when it returns, read in bulk
            print("table:", sorted(view.items()))
            assert dict(view.items()) == {
                "a1": {"sku": "a1", "eur": 5.0},
                "c3": {"sku": "c3", "eur": 5.0},
            }
            changes = []
            view.listen(lambda key, value: changes.append((key, value)))  # later changes
            with prices.publisher() as publisher:
                publisher.publish({"sku": "a1", "eur": 4.5}, key="a1")
                publisher.delete("c3")
            view.refresh()  # returns once everything published before it is applied
            print("after refresh:", dict(view.items()), "listeners heard:", changes)
            # In order per key (keys of different channels may come in either order).
            assert sorted(changes, key=str) == [("a1", {"sku": "a1", "eur": 4.5}), ("c3", None)]

        rows = raytopic.data.read_table(prices).to_pandas()  # the same table, as a Dataset
        print(rows[["key", "sku", "eur"]].to_string(index=False))
        print("table view and read_table agree:", list(rows["key"]) == ["a1"])
    finally:
        prices.destroy()
