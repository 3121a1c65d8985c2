"""Put messages back in order per correlation id (parallel producers, out of order).

Run: python examples/resequencer.py
"""

import raytopic as rt

released = []
resequencer = rt.Resequencer(
    "steps",
    timeout_ms=500,
    start=0,  # the first expected number
    on_release=lambda seq, payload, correlation_id: released.append(payload),
)
for seq, order in ((1, "A"), (0, "B"), (2, "A"), (0, "A"), (1, "B")):
    resequencer.accept(seq, f"{order}{seq}", correlation_id=order)
print("released in order per order id:", released)
print(resequencer.stats)
