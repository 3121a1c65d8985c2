"""Unit tests of topic configuration (no Ray): TopicConfig.create validation, check helpers."""

from __future__ import annotations

import dataclasses
import math
import pickle
import re
from datetime import UTC, datetime

import pytest

from raytopic.core.config import (
    DEFAULT_NAMESPACE,
    MAX_COUNT,
    MAX_LINGER_SECONDS,
    MAX_RETENTION_SECONDS,
    MAX_SECONDS,
    Overflow,
    Start,
    TopicConfig,
    check_bool,
    check_datetime,
    check_instance,
    check_int,
    check_items,
    check_name,
    check_namespace,
    check_nonnegative_int,
    check_nonnegative_number,
    check_positive_int,
    check_seconds,
    check_timeout,
    shown,
)
from raytopic.core.errors import InvalidArgumentError, InvalidTypeError, TopicError
from raytopic.core.records import Position

# -- TopicConfig.create --------------------------------------------------------


def test_create_with_defaults() -> None:
    config = TopicConfig.create("orders")
    assert (config.name, config.namespace) == ("orders", DEFAULT_NAMESPACE)
    assert DEFAULT_NAMESPACE == "raytopic"
    assert (config.channels, config.capacity, config.retain, config.ttl) == (
        8,
        1_000_000,
        False,
        None,
    )
    assert config.overflow is Overflow.BLOCK
    assert config.groups == ()
    assert re.fullmatch(r"[0-9a-f]{16}", config.topic_id)


def test_create_keeps_every_given_setting() -> None:
    config = TopicConfig.create(
        "t.1_a-b",
        channels=3,
        capacity=10,
        retain=True,
        ttl=2,
        overflow="overwrite",
        groups=["g1", "g2"],
        namespace="team-a",
    )
    assert (config.name, config.namespace, config.channels, config.capacity) == (
        "t.1_a-b",
        "team-a",
        3,
        10,
    )
    assert config.retain is True
    assert config.ttl == 2.0
    assert isinstance(config.ttl, float)
    assert config.overflow is Overflow.OVERWRITE
    assert config.groups == ("g1", "g2")
    assert TopicConfig.create("t", overflow=Overflow.FAIL).overflow is Overflow.FAIL
    assert TopicConfig.create("t", groups=(g for g in ["x"])).groups == ("x",)


def test_every_topic_gets_a_fresh_id() -> None:
    ids = {TopicConfig.create("same").topic_id for _ in range(50)}
    assert len(ids) == 50


def test_config_is_frozen_and_picklable() -> None:
    config = TopicConfig.create("orders", groups=["g"])
    assert pickle.loads(pickle.dumps(config)) == config
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.channels = 2  # type: ignore[misc]


@pytest.mark.parametrize(
    ("arguments", "error", "names"),
    [
        ({"channels": 0}, InvalidArgumentError, "channels"),
        ({"channels": -3}, InvalidArgumentError, "channels"),
        ({"channels": 1.0}, InvalidTypeError, "channels"),
        ({"channels": "8"}, InvalidTypeError, "channels"),
        ({"channels": True}, InvalidTypeError, "channels"),
        ({"channels": None}, InvalidTypeError, "channels"),
        ({"capacity": 0}, InvalidArgumentError, "capacity"),
        ({"capacity": -1}, InvalidArgumentError, "capacity"),
        ({"capacity": 10.5}, InvalidTypeError, "capacity"),
        ({"capacity": False}, InvalidTypeError, "capacity"),
        ({"ttl": 0}, InvalidArgumentError, "ttl"),
        ({"ttl": -1.5}, InvalidArgumentError, "ttl"),
        ({"ttl": math.nan}, InvalidArgumentError, "ttl"),
        ({"ttl": "10"}, InvalidTypeError, "ttl"),
        ({"ttl": True}, InvalidTypeError, "ttl"),
        ({"overflow": "drop"}, InvalidArgumentError, "overflow"),
        ({"overflow": "BLOCK"}, InvalidArgumentError, "overflow"),
        ({"overflow": ""}, InvalidArgumentError, "overflow"),
        ({"overflow": None}, InvalidArgumentError, "overflow"),
        ({"overflow": 1}, InvalidArgumentError, "overflow"),
        ({"retain": 1}, InvalidTypeError, "retain"),
        ({"retain": "yes"}, InvalidTypeError, "retain"),
        ({"compaction": {"max_lag_s": 1}}, InvalidTypeError, "compaction"),
        ({"groups": "g1"}, InvalidTypeError, "groups"),
        ({"groups": 5}, InvalidTypeError, "groups"),
        ({"groups": ["g", "g"]}, InvalidArgumentError, "groups"),
        ({"groups": ["ok", "bad name"]}, InvalidArgumentError, "group name"),
        ({"groups": ["ok", ""]}, InvalidArgumentError, "group name"),
        ({"groups": ["a:b"]}, InvalidArgumentError, "group name"),
        ({"groups": [7]}, InvalidTypeError, "group name"),
        ({"namespace": ""}, InvalidArgumentError, "namespace"),
        ({"namespace": "a b"}, InvalidArgumentError, "namespace"),
        ({"namespace": 3}, InvalidTypeError, "namespace"),
    ],
)
def test_create_rejects_each_bad_argument_naming_it(
    arguments: dict, error: type[TopicError], names: str
) -> None:
    with pytest.raises(error) as raised:
        TopicConfig.create("orders", **arguments)
    assert names in str(raised.value)
    assert isinstance(raised.value, TopicError)
    assert isinstance(raised.value, ValueError if error is InvalidArgumentError else TypeError)


@pytest.mark.parametrize(
    "name",
    [
        *("", " ", "has space", "a:b", "../up", "a/b", "-lead", "_lead", ".lead"),
        *("x" * 129, "tab\t", "new\nline", "trailing\n", "é", "a*", "a@b"),
    ],
)
def test_create_rejects_unsafe_topic_names(name: str) -> None:
    with pytest.raises(InvalidArgumentError, match="topic name"):
        TopicConfig.create(name)


@pytest.mark.parametrize("name", [None, 1, b"orders", ["orders"]])
def test_create_rejects_a_topic_name_that_is_not_a_str(name: object) -> None:
    with pytest.raises(InvalidTypeError, match="topic name must be a str"):
        TopicConfig.create(name)


# -- names ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a", "A", "0", "orders", "x" * 128, "a.b-c_d", "9lives", "a..b"])
def test_check_name_accepts_safe_names(name: str) -> None:
    assert check_name(name, "topic name") == name


def test_check_name_messages_name_what_was_checked() -> None:
    with pytest.raises(InvalidArgumentError, match=r"^group name 'a b' is not a valid name"):
        check_name("a b", "group name")
    with pytest.raises(InvalidTypeError, match=r"^namespace must be a str, got int$"):
        check_name(3, "namespace")


# -- enums ---------------------------------------------------------------------


def test_overflow_parse_accepts_names_and_members() -> None:
    assert Overflow.parse("block") is Overflow.BLOCK
    assert Overflow.parse("overwrite") is Overflow.OVERWRITE
    assert Overflow.parse("fail") is Overflow.FAIL
    assert Overflow.parse(Overflow.FAIL) is Overflow.FAIL
    assert Overflow.FAIL == "fail"
    assert [member.value for member in Overflow] == ["block", "overwrite", "fail"]


def test_overflow_parse_names_the_argument_and_the_choices() -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        Overflow.parse("drop", argument="policy")
    assert str(raised.value) == "policy must be one of 'block', 'overwrite', 'fail', got 'drop'"
    with pytest.raises(InvalidArgumentError, match=r"^overflow must be one of"):
        Overflow.parse("Fail")


def test_start_parse() -> None:
    assert Start.parse("earliest") is Start.EARLIEST
    assert Start.parse("latest") is Start.LATEST
    assert Start.parse(Start.LATEST) is Start.LATEST
    for bad in ("head", "EARLIEST", "", None, 0):
        with pytest.raises(InvalidArgumentError, match="start must be 'earliest' or 'latest'"):
            Start.parse(bad)  # type: ignore[arg-type]


# -- numbers -------------------------------------------------------------------


def test_check_positive_int() -> None:
    assert check_positive_int(1, "n") == 1
    assert check_positive_int(10**12, "n") == 10**12
    with pytest.raises(InvalidArgumentError, match=r"^batch_size must be >= 1, got 0$"):
        check_positive_int(0, "batch_size")
    for bad in (1.0, "1", True, None):
        with pytest.raises(InvalidTypeError, match=r"^batch_size must be an int"):
            check_positive_int(bad, "batch_size")


def test_check_nonnegative_int() -> None:
    assert check_nonnegative_int(0, "n") == 0
    assert check_nonnegative_int(5, "n") == 5
    with pytest.raises(InvalidArgumentError, match=r"^n must be >= 0, got -1$"):
        check_nonnegative_int(-1, "n")
    for bad in (0.0, "0", False):
        with pytest.raises(InvalidTypeError, match=r"^n must be an int"):
            check_nonnegative_int(bad, "n")


def test_check_nonnegative_number() -> None:
    assert check_nonnegative_number(0, "linger") == 0.0
    assert isinstance(check_nonnegative_number(2, "linger"), float)
    assert check_nonnegative_number(0.005, "linger") == 0.005
    for bad in (-0.001, -1, math.nan):
        with pytest.raises(InvalidArgumentError, match=r"^linger must be >= 0"):
            check_nonnegative_number(bad, "linger")
    for bad in ("0", None, True):
        with pytest.raises(InvalidTypeError, match=r"^linger must be a number"):
            check_nonnegative_number(bad, "linger")


def test_check_timeout() -> None:
    assert check_timeout(None, "timeout") is None
    assert check_timeout(1, "timeout") == 1.0
    assert isinstance(check_timeout(1, "timeout"), float)
    assert check_timeout(0.25, "timeout") == 0.25
    with pytest.raises(InvalidTypeError, match=r"^timeout must be a number of seconds"):
        check_timeout(None, "timeout", allow_none=False)
    for bad in (0, 0.0, -1, math.nan):
        with pytest.raises(InvalidArgumentError, match=r"^block_timeout must be > 0 seconds"):
            check_timeout(bad, "block_timeout")
    for bad in ("1", True, [1]):
        with pytest.raises(InvalidTypeError, match=r"^block_timeout must be a number of seconds"):
            check_timeout(bad, "block_timeout")


# -- bounds: no setting can hold a value a background thread cannot wait on ------


@pytest.mark.parametrize("bad", [math.inf, -math.inf, 10**400, 2**63, MAX_SECONDS + 1])
def test_durations_are_finite_and_at_most_a_year(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^timeout must be > 0 seconds and at most"):
        check_timeout(bad, "timeout")
    with pytest.raises(InvalidArgumentError, match=r"^delay must be >= 0 seconds and at most"):
        check_nonnegative_number(bad, "delay")
    assert check_seconds(MAX_SECONDS, "timeout") == MAX_SECONDS


def test_a_bound_of_its_own_is_named_in_the_message() -> None:
    with pytest.raises(InvalidArgumentError, match=r"at most 3600 \(an hour\), got inf$"):
        check_nonnegative_number(math.inf, "linger", maximum=MAX_LINGER_SECONDS)
    assert check_timeout(MAX_RETENTION_SECONDS, "ttl", maximum=MAX_RETENTION_SECONDS)
    with pytest.raises(InvalidArgumentError, match="a century"):
        check_timeout(MAX_RETENTION_SECONDS * 2, "ttl", maximum=MAX_RETENTION_SECONDS)


def test_check_seconds_zero_and_none_only_where_allowed() -> None:
    assert check_seconds(0, "timeout", allow_zero=True) == 0.0
    assert check_seconds(None, "timeout", allow_none=True) is None
    with pytest.raises(InvalidArgumentError):
        check_seconds(0, "timeout")
    with pytest.raises(InvalidTypeError):
        check_seconds(None, "timeout")
    with pytest.raises(InvalidTypeError):
        check_seconds(False, "timeout", allow_zero=True)  # a bool is not a number


def test_create_bounds_every_duration() -> None:
    for bad in (math.inf, 10**400):
        with pytest.raises(InvalidArgumentError, match=r"^ttl"):
            TopicConfig.create("t", ttl=bad)
        with pytest.raises(InvalidArgumentError, match=r"^sync"):
            TopicConfig.create("t", sync=bad)
        with pytest.raises(InvalidArgumentError, match=r'^store_retention\["seconds"\]'):
            TopicConfig.create("t", store="/tmp/s", store_retention={"seconds": bad})
    with pytest.raises(InvalidArgumentError, match=r"^channels must be <= 10000"):
        TopicConfig.create("t", channels=10**400)
    with pytest.raises(InvalidTypeError, match=r"^groups must be an iterable"):
        TopicConfig.create("t", groups={"billing": 1})


def test_check_int_bounds_and_messages_of_huge_ints() -> None:
    assert check_int(5, "n", minimum=0, maximum=5) == 5
    with pytest.raises(InvalidArgumentError, match=r"^n must be <= 5, got 6$"):
        check_int(6, "n", maximum=5)
    with pytest.raises(InvalidArgumentError, match=r"^n must be >= 1, got an int of 1329 bits$"):
        check_positive_int(-(10**400), "n")
    assert shown(10**5000) == "an int of 16610 bits"  # str() of it would raise


def test_every_int_argument_is_bounded_by_a_signed_64_bit_int() -> None:
    # check_int without a bound took any int: receive_batch(2**70), max_in_flight=2**70,
    # capacity=2**70 went through to the channels and Ray Data.
    assert check_int(MAX_COUNT, "n") == MAX_COUNT and check_int(-MAX_COUNT - 1, "n") < 0
    with pytest.raises(InvalidArgumentError, match=rf"^n must be <= {MAX_COUNT}, got an int"):
        check_positive_int(2**70, "n")
    with pytest.raises(
        InvalidArgumentError, match=rf"^n must be <= {MAX_COUNT}, got {MAX_COUNT + 1}"
    ):
        check_nonnegative_int(MAX_COUNT + 1, "n")
    with pytest.raises(InvalidArgumentError, match=rf"^n must be >= {-MAX_COUNT - 1}"):
        check_int(-MAX_COUNT - 2, "n")
    with pytest.raises(InvalidArgumentError, match=rf"^sequence must be >= -1 and <= {MAX_COUNT}"):
        Position("t", 0, MAX_COUNT + 1)
    assert Position("t", 0, MAX_COUNT).sequence == MAX_COUNT
    assert shown("x" * 200).endswith("...") and len(shown("x" * 200)) == 80


@pytest.mark.parametrize("bad", [None, 5, 1.5, "ab", b"ab", {"a": 1}, object()])
def test_check_items_refuses_what_is_not_a_list_of_items(bad: object) -> None:
    with pytest.raises(InvalidTypeError, match=r"^values must be an iterable of items"):
        check_items(bad, "values")


def test_check_items_takes_any_iterable() -> None:
    assert check_items((1, 2), "values") == [1, 2]
    assert check_items(iter([3]), "values") == [3]
    assert check_items({4}, "values") == [4]


def test_check_datetime() -> None:
    assert check_datetime(datetime(2020, 1, 1, tzinfo=UTC), "to") == 1577836800.0
    assert check_datetime(datetime.min.replace(tzinfo=UTC), "to") < 0
    with pytest.raises(
        InvalidArgumentError, match=r"^to datetime.datetime\(1, 1, 1, 0, 0\) is out"
    ):
        check_datetime(datetime(1, 1, 1), "to")  # naive: local time, before year 1 in UTC
    with pytest.raises(InvalidTypeError, match=r"^to must be a datetime, got str$"):
        check_datetime("2020-01-01", "to")  # type: ignore[arg-type]


def test_check_bool_namespace_and_instance() -> None:
    assert check_bool(False, "exist_ok") is False
    with pytest.raises(InvalidTypeError, match=r"^exist_ok must be a bool, got int$"):
        check_bool(1, "exist_ok")
    assert check_namespace(None) == DEFAULT_NAMESPACE
    assert check_namespace("team-a") == "team-a"
    with pytest.raises(InvalidTypeError, match=r"^namespace must be a str, got int$"):
        check_namespace(5)
    assert check_instance("k", str, "key") == "k"
    with pytest.raises(InvalidTypeError, match=r"^key must be a str, got int$"):
        check_instance(5, str, "key")
    with pytest.raises(
        InvalidTypeError, match=r"^config must be a raytopic.core.config.TopicConfig"
    ):
        check_instance("orders", TopicConfig, "config")
