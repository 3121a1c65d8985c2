"""Unit tests of topic configuration (no Ray): TopicConfig.create validation, check helpers."""

from __future__ import annotations

import dataclasses
import math
import pickle
import re

import pytest

from raytopic.core.config import (
    DEFAULT_NAMESPACE,
    Overflow,
    Start,
    TopicConfig,
    check_name,
    check_nonnegative_int,
    check_nonnegative_number,
    check_positive_int,
    check_timeout,
)
from raytopic.core.errors import InvalidArgumentError, InvalidTypeError, TopicError

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
        ({"retain": None}, InvalidTypeError, "retain"),
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
