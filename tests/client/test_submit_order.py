"""SubmitOrder: tickets are served one at a time, in the order they were taken. No Ray."""

from __future__ import annotations

import threading
import time

import pytest

from raytopic.client.submit_order import SubmitOrder


def test_a_later_ticket_waits_for_an_earlier_one_held_up() -> None:
    order = SubmitOrder()
    first, second = order.ticket(), order.ticket()
    served: list[int] = []

    def submit(ticket: int, delay: float) -> None:
        time.sleep(delay)
        with order.turn(ticket):
            served.append(ticket)

    threads = [
        threading.Thread(target=submit, args=(first, 0.2)),  # numbered first, held up
        threading.Thread(target=submit, args=(second, 0.0)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert served == [first, second]


def test_the_turn_passes_on_when_a_submission_raises() -> None:
    order = SubmitOrder()
    first, second = order.ticket(), order.ticket()
    with pytest.raises(RuntimeError), order.turn(first):
        raise RuntimeError("could not submit")
    done = threading.Event()

    def submit() -> None:
        with order.turn(second):
            done.set()

    threading.Thread(target=submit, daemon=True).start()
    assert done.wait(10)
