"""Unit tests of key routing (no Ray): CRC-32 channels, stable across processes and hash seeds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zlib
from decimal import Decimal

import numpy as np
import pytest

from raytopic.client.routing import (
    MAX_INT_KEY,
    MIN_INT_KEY,
    channel_for_key,
    key_bytes,
    key_hash,
    stored_key,
)
from raytopic.core.errors import InvalidArgumentError, InvalidTypeError

# CRC-32 (IEEE, zlib) of the key bytes; 0xCBF43926 is the standard check value
# of b"123456789".
CRC = {
    "123456789": 0xCBF43926,
    "hello": 0x3610A686,
    "user-42": 0x7D06B873,
    "café": 0x98AD42B5,
    "": 0x00000000,
}

KEYS_AND_CHANNELS = [
    # (key, channel_count, channel)
    ("123456789", 1000, 262),
    ("123456789", 8, 6),
    ("hello", 8, 6),
    ("hello", 3, 1),
    ("user-42", 16, 3),
    ("café", 8, 5),
    ("", 8, 0),
    (b"hello", 8, 6),
    (bytearray(b"hello"), 8, 6),
    (memoryview(b"hello"), 8, 6),
    (b"\x00\xff", 1000, 594),
    (42, 16, 8),
    (-7, 16, 15),
    (True, 8, 5),
    (False, 8, 0),
]

# What Spark computes for `crc32(cast(k AS STRING))` (checked against Spark 3.5.7):
# integer keys 0, 1, 2 and the booleans, whose text Spark writes in lower case.
# (A list, not a dict: True == 1 and False == 0 as dict keys.)
SPARK_CRC = [(0, 4108050209), (1, 2212294583), (2, 450215437), (-7, 3645828383)]
SPARK_CRC += [(True, 4261170317), (False, 734881840)]


def test_key_bytes_encode_each_accepted_type() -> None:
    assert key_bytes("café") == b"caf\xc3\xa9"
    assert key_bytes(b"\x00\xff") == b"\x00\xff"
    assert key_bytes(bytearray(b"ab")) == b"ab"
    assert key_bytes(memoryview(b"ab")) == b"ab"
    assert type(key_bytes(bytearray(b"ab"))) is bytes
    assert key_bytes(42) == b"42"
    assert key_bytes(-7) == b"-7"
    assert key_bytes(True) == b"true"  # Spark's text of a boolean, not Python's
    assert key_bytes(False) == b"false"


def test_integer_and_boolean_keys_hash_as_spark_casts_them_to_strings() -> None:
    for key, crc in SPARK_CRC:
        assert zlib.crc32(key_bytes(key)) == crc
        assert channel_for_key(key, 7) == crc % 7


def test_numpy_integers_and_booleans_route_like_python_ones() -> None:
    for kind in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint64):
        assert key_bytes(kind(42)) == b"42"
        assert channel_for_key(kind(2), 1000) == 450215437 % 1000
    assert key_bytes(np.int64(-7)) == b"-7"
    assert key_bytes(np.bool_(True)) == b"true"
    assert key_bytes(np.bool_(False)) == b"false"


@pytest.mark.parametrize("key", [1.5, 1.0, 1e20, float("nan"), np.float64(2.0), np.float32(0.5)])
def test_float_keys_are_refused_because_spark_writes_them_differently(key: object) -> None:
    with pytest.raises(InvalidTypeError, match="float key"):
        key_bytes(key)
    with pytest.raises(TypeError):
        channel_for_key(key, 8)


def test_int_keys_fit_a_signed_64_bit_int() -> None:
    for key in (MAX_INT_KEY, MIN_INT_KEY, np.int64(MIN_INT_KEY), np.uint64(MAX_INT_KEY)):
        assert key_bytes(key) == str(int(key)).encode("ascii")
        assert stored_key(key) == int(key)


def test_an_int_key_past_64_bits_is_refused() -> None:
    # -(10**5000) has no decimal text in Python (a raw ValueError before the bound)
    for key in (MAX_INT_KEY + 1, MIN_INT_KEY - 1, 2**200, -(10**5000), np.uint64(2**64 - 1)):
        for call in (key_bytes, key_hash, stored_key, lambda key: channel_for_key(key, 8)):
            with pytest.raises(InvalidArgumentError, match="signed 64-bit int"):
                call(key)


def test_a_str_key_and_its_utf8_bytes_share_a_channel() -> None:
    for text in ("hello", "café", "ключ", "🔑"):
        assert channel_for_key(text, 97) == channel_for_key(text.encode("utf-8"), 97)


@pytest.mark.parametrize(("key", "count", "channel"), KEYS_AND_CHANNELS)
def test_channel_for_key_is_crc32_modulo_the_channel_count(
    key: object, count: int, channel: int
) -> None:
    assert channel_for_key(key, count) == channel


def test_fixed_crc32_values() -> None:
    for text, crc in CRC.items():
        for count in (1, 2, 7, 8, 1000, 2**31):
            assert channel_for_key(text, count) == crc % count


def test_a_single_channel_takes_every_key() -> None:
    assert {channel_for_key(key, 1) for key, _, _ in KEYS_AND_CHANNELS} == {0}


def test_channels_stay_in_range() -> None:
    for count in (1, 2, 5, 8, 13):
        channels = {channel_for_key(f"key-{i}", count) for i in range(500)}
        assert channels == set(range(count))  # every channel used, none out of range


@pytest.mark.parametrize(
    "key", [None, (1, 2), ["a"], {"a": 1}, {1}, object(), Decimal("1.5"), 1j, str]
)
def test_other_key_types_raise_invalid_type_error(key: object) -> None:
    with pytest.raises(InvalidTypeError, match="a key must be a str, bytes, int or bool"):
        key_bytes(key)
    with pytest.raises(TypeError):
        channel_for_key(key, 8)


def test_routing_is_the_same_in_another_interpreter_with_another_hash_seed() -> None:
    keys = ["hello", "user-42", "café", "123456789", "x" * 300]
    script = (
        "import json, sys\n"
        "from raytopic.client.routing import channel_for_key\n"
        "keys = json.loads(sys.argv[1])\n"
        "out = [channel_for_key(k, n) for k in keys for n in (3, 8, 1000)]\n"
        "out += [channel_for_key(k.encode(), 8) for k in keys]\n"
        "out += [channel_for_key(v, 8) for v in (42, -7, True, False)]\n"
        "print(json.dumps([hash('hello'), out]))\n"
    )
    results = []
    for seed in ("1", "2"):
        done = subprocess.run(
            [sys.executable, "-c", script, json.dumps(keys)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        )
        results.append(json.loads(done.stdout))
    (hash_1, channels_1), (hash_2, channels_2) = results
    assert hash_1 != hash_2  # the interpreters did salt str hashes differently
    here = [channel_for_key(k, n) for k in keys for n in (3, 8, 1000)]
    here += [channel_for_key(k.encode(), 8) for k in keys]
    here += [channel_for_key(v, 8) for v in (42, -7, True, False)]
    assert channels_1 == channels_2 == here
    assert here[:3] == [CRC["hello"] % 3, CRC["hello"] % 8, CRC["hello"] % 1000]
