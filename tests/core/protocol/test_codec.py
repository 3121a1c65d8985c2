"""Unit tests of the typed channel requests (no Ray): built by keyword, packed as
one bytes argument, and nothing but a data-path request is served."""

from __future__ import annotations

import pickle

import pytest

from raytopic.core.errors import InvalidArgumentError, TopicFullError
from raytopic.core.payloads import OUT_OF_BAND_MIN, PickledValues
from raytopic.core.protocol import (
    CHANNEL_REQUESTS,
    SIBLING_REQUESTS,
    Append,
    AppendAck,
    AppendPieces,
    CursorState,
    Nack,
    Receive,
    Take,
    Watch,
    pack_request,
    pack_small,
    unpack_call,
    unpack_request,
    unpack_small,
)


def test_a_packed_request_round_trips_with_its_type() -> None:
    request = Append(publisher_id="publisher-1", batch=3, overflow="block", timeout=60.0)
    packed = pack_request(request)
    assert isinstance(packed, bytes)
    unpacked = unpack_request(packed, CHANNEL_REQUESTS)
    assert unpacked == request and type(unpacked) is Append
    assert unpacked.statuses is False and unpacked.each is False
    assert unpacked._asdict() == {
        "publisher_id": "publisher-1",
        "batch": 3,
        "overflow": "block",
        "timeout": 60.0,
        "statuses": False,
        "each": False,
    }


def test_a_call_of_pieces_round_trips_with_each_pieces_kind() -> None:
    request = AppendPieces(
        publisher_id="p", batch=7, overflow="fail", timeout=None, whole=(False, True, True)
    )
    unpacked = unpack_request(pack_request(request), CHANNEL_REQUESTS)
    assert type(unpacked) is AppendPieces and unpacked == request
    assert unpacked._fields == ("publisher_id", "batch", "overflow", "timeout", "whole")


def test_defaults_leave_the_flags_off_and_a_request_is_known_by_its_type() -> None:
    take = Take(reader_id="r", lease=None, max_count=5)
    assert (take.wait, take.from_sequence, take.again) == (0.0, None, False)  # no position
    receive = Receive(reader_id="r", stream="s", number=0, max_count=1, single=True)
    assert (receive.spread, receive.here_only, receive.view) == (False, False, None)
    assert Nack(reader_id="r", entries=()).delay == 0.0
    assert len(set(CHANNEL_REQUESTS)) == len(CHANNEL_REQUESTS)
    # The channel dispatches on the record's type: no record names a method.
    assert not any(hasattr(kind, "method") for kind in CHANNEL_REQUESTS)


@pytest.mark.parametrize(
    "packed",
    [
        pickle.dumps(("append", ("p", 0, "block", 1.0, False))),  # the old positional form
        pickle.dumps(("destroy_group", ("g",))),  # not a data-path method
        pickle.dumps(InvalidArgumentError("not a request")),
        pickle.dumps("receive"),
        b"not a pickle",
        "a str, not bytes",
    ],
)
def test_anything_but_a_packed_data_path_request_is_refused(packed: object) -> None:
    with pytest.raises(InvalidArgumentError):
        unpack_request(packed, CHANNEL_REQUESTS)  # type: ignore[arg-type]


def test_a_small_reply_to_a_sibling_packs_into_bytes_a_large_one_stays_itself() -> None:
    # Ray moves bytes raw but takes any other object through its pickle path, about
    # 0.2 ms a hop here whatever its size; a large payload keeps Ray's zero-copy path.
    assert set(SIBLING_REQUESTS) == {Take, Watch}
    small = CursorState(4, 3, 9, 0)
    packed = pack_small(small)
    assert type(packed) is bytes and unpack_small(packed) == small
    large = PickledValues.from_pickles([b"x" * OUT_OF_BAND_MIN])
    assert pack_small(large) is large
    assert unpack_small(large) is large
    # One plain pickle refuses (a lambda: cloudpickle's alone can) goes as itself: an
    # append's acks are packed so, and must never fail the append that went in.
    error = TopicFullError("full")
    error.hint = lambda: None  # (an exception pickles its attributes)
    refused = (AppendAck(0, 1, 0.0, error=error),)
    assert pack_small(refused) is refused and unpack_small(refused) is refused
    acks = (AppendAck(7, 3, 1.5),)
    assert type(pack_small(acks)) is bytes and unpack_small(pack_small(acks)) == acks


def test_a_payload_that_is_not_a_packed_one_is_refused_typed() -> None:
    packed = pack_request(Append(publisher_id="p", batch=0, overflow="block", timeout=1.0))
    values = PickledValues.from_values(["x"])
    request, payload = unpack_call(packed, pack_small(values), CHANNEL_REQUESTS)
    assert type(request) is Append and payload.decode() == ["x"]
    assert unpack_call(packed, values, CHANNEL_REQUESTS)[1] is values  # sent as itself
    with pytest.raises(InvalidArgumentError, match="payload"):
        unpack_call(packed, b"not a pickle", CHANNEL_REQUESTS)
