"""Unit tests of the error hierarchy (no Ray cluster): stdlib bases, pickling, unwrapping."""

from __future__ import annotations

import pickle

import pytest
import ray.exceptions

import raytopic.core.errors as errors
from raytopic.core.errors import (
    ChannelFailedError,
    ChannelUnavailableError,
    ClosedError,
    DataLossError,
    ForeignElementError,
    GroupBusyError,
    GroupFilterError,
    GroupModeError,
    GroupNotFoundError,
    InvalidArgumentError,
    InvalidTypeError,
    NotOwnerError,
    PoisonElementError,
    PositionMismatchError,
    PublisherClosedError,
    ReceivePassedOverError,
    ResetInProgressError,
    StaleSequenceError,
    StoreError,
    SubscriberClosedError,
    TopicError,
    TopicExistsError,
    TopicFullError,
    TopicNotFoundError,
    TopicSettingsError,
    TransactionAbortedError,
    TransactionFencedError,
    unwrap_ray_error,
)
from raytopic.core.records import Position

SIMPLE = [
    TopicNotFoundError,
    TopicExistsError,
    GroupNotFoundError,
    NotOwnerError,
    ClosedError,
    ForeignElementError,
    GroupBusyError,
    GroupFilterError,
    GroupModeError,
    SubscriberClosedError,
    PublisherClosedError,
    TopicFullError,
    ResetInProgressError,
    InvalidArgumentError,
    PositionMismatchError,
    InvalidTypeError,
    ChannelUnavailableError,
    ChannelFailedError,
    ReceivePassedOverError,
    StoreError,
    GroupModeError,
    GroupFilterError,
    ForeignElementError,
]


def test_transaction_errors_pickle_with_their_reason_and_fenced_is_aborted() -> None:
    error = TransactionFencedError("a newer holder exists", "fenced")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is TransactionFencedError and copy.reason == "fenced"
    assert str(copy) == "a newer holder exists"
    assert isinstance(copy, TransactionAbortedError)
    assert TransactionAbortedError("no room").reason == "no room"


def test_a_data_loss_error_pickles_with_its_epochs_and_is_a_stale_sequence_error() -> None:
    error = DataLossError("lost", head_sequence=1 << 40, channel=3, old_epoch=1, new_epoch=2)
    copy = pickle.loads(pickle.dumps(error))
    assert isinstance(copy, StaleSequenceError)
    assert (copy.head_sequence, copy.channel, copy.old_epoch, copy.new_epoch) == (1 << 40, 3, 1, 2)
    assert str(copy) == "lost"
    assert issubclass(ChannelFailedError, ChannelUnavailableError)


def test_a_topic_settings_error_pickles_with_its_differences_and_is_a_value_error() -> None:
    error = TopicSettingsError("made with channels=2", {"channels": (2, 3)})
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is TopicSettingsError and copy.differences == {"channels": (2, 3)}
    assert str(copy) == "made with channels=2"
    assert isinstance(copy, InvalidArgumentError) and isinstance(copy, ValueError)


def test_a_poison_element_error_pickles_with_its_position_and_cause() -> None:
    position = Position("t0pic1d", 2, 17)
    error = PoisonElementError("poison", 2, position, "ModuleNotFoundError", "No module 'x'")
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.channel, copy.position) == (2, position)
    assert (copy.cause_type, copy.cause_message) == ("ModuleNotFoundError", "No module 'x'")
    assert str(copy) == "poison" and isinstance(copy, TopicError)


def test_every_exported_error_is_a_topic_error() -> None:
    exported = [getattr(errors, name) for name in errors.__all__ if name.endswith("Error")]
    assert set(exported) == {
        *SIMPLE,
        StaleSequenceError,
        DataLossError,
        PoisonElementError,
        TopicError,
        TopicSettingsError,
        TransactionAbortedError,
        TransactionFencedError,
    }
    for error in exported:
        assert issubclass(error, TopicError)
        assert issubclass(error, Exception)
    assert TopicError.__bases__ == (Exception,)


@pytest.mark.parametrize(
    ("error", "stdlib"),
    [
        (TopicNotFoundError, LookupError),
        (GroupNotFoundError, LookupError),
        (InvalidArgumentError, ValueError),
        (PositionMismatchError, ValueError),
        (GroupModeError, ValueError),
        (GroupFilterError, ValueError),
        (ForeignElementError, ValueError),
        (InvalidTypeError, TypeError),
    ],
)
def test_errors_also_inherit_the_stdlib_class_users_catch(
    error: type[TopicError], stdlib: type[Exception]
) -> None:
    assert issubclass(error, stdlib)
    with pytest.raises(stdlib):
        raise error("x")


def test_the_narrower_errors_sit_under_their_families() -> None:
    assert issubclass(SubscriberClosedError, ClosedError)
    assert issubclass(PublisherClosedError, ClosedError)
    assert issubclass(PositionMismatchError, InvalidArgumentError)
    for error in (
        TopicExistsError,
        NotOwnerError,
        TopicFullError,
        ResetInProgressError,
        StaleSequenceError,
        ClosedError,
    ):
        assert not issubclass(error, (LookupError, ValueError, TypeError))
    assert not issubclass(InvalidTypeError, ValueError)
    assert not issubclass(InvalidArgumentError, TypeError)


@pytest.mark.parametrize("error", SIMPLE)
def test_simple_errors_pickle_round_trip(error: type[TopicError]) -> None:
    original = error("topic 'orders' says no")
    again = pickle.loads(pickle.dumps(original))
    assert type(again) is error
    assert str(again) == "topic 'orders' says no"
    assert again.args == original.args


def test_stale_sequence_error_carries_head_and_skipped() -> None:
    error = StaleSequenceError("sequence 3 is below the head 10", head_sequence=10, skipped=7)
    assert (error.head_sequence, error.skipped) == (10, 7)
    assert str(error) == "sequence 3 is below the head 10"
    assert StaleSequenceError("read below the head", 4).skipped == 0


@pytest.mark.parametrize("skipped", [0, 7])
def test_stale_sequence_error_pickles_with_its_fields(skipped: int) -> None:
    original = StaleSequenceError("below the head", head_sequence=10, skipped=skipped)
    again = pickle.loads(pickle.dumps(original))
    assert type(again) is StaleSequenceError
    assert (again.head_sequence, again.skipped, str(again)) == (10, skipped, "below the head")


def test_unwrap_ray_error_reraises_the_topic_error_itself() -> None:
    cause = NotOwnerError("member m1 does not own channel 3")
    wrapped = ray.exceptions.RayTaskError("commit", "traceback text", cause)
    with pytest.raises(NotOwnerError) as raised, unwrap_ray_error():
        raise wrapped
    assert raised.value is cause
    assert raised.value.__cause__ is wrapped


@pytest.mark.parametrize("error", SIMPLE)
def test_an_error_raised_from_a_ref_prints_its_own_message(error: type[TopicError]) -> None:
    # What ray.get raises for an actor call that raised: Ray's dual class, whose
    # str() was the actor's whole traceback.
    traceback = "Traceback (most recent call last):\n  File 'channel.py', line 1\nboom"
    wrapped = ray.exceptions.RayTaskError(
        "ChannelActor.request", traceback, error("channel 0 is full"), "ray::C", 1, "127.0.0.1"
    ).as_instanceof_cause()
    assert isinstance(wrapped, error) and isinstance(wrapped, ray.exceptions.RayTaskError)
    assert str(wrapped) == "channel 0 is full"


def test_unwrap_ray_error_leaves_other_errors_alone() -> None:
    wrapped = ray.exceptions.RayTaskError("f", "traceback text", ZeroDivisionError("boom"))
    with pytest.raises(ray.exceptions.RayTaskError) as raised, unwrap_ray_error():
        raise wrapped
    assert raised.value is wrapped
    with pytest.raises(KeyError), unwrap_ray_error():
        raise KeyError("plain")
    with unwrap_ray_error():
        pass
