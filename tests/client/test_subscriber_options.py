"""A subscriber's options: checked once into one frozen record (no Ray)."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

import raytopic as rt
from raytopic.client.subscriber_options import SubscriberOptions
from raytopic.core.shared_group import SharedGroup


def test_defaults_make_an_anonymous_reader_that_starts_at_the_tail() -> None:
    options = SubscriberOptions.check()
    assert (options.group, options.mode, options.timeout) == (None, "owned", 30.0)
    assert options.spec.start_latest and options.spec.group is None
    assert not options.cooperative and options.listener is None


def test_a_new_group_starts_at_the_head_and_a_shared_group_definition_sets_the_mode() -> None:
    assert not SubscriberOptions.check(group="g").spec.start_latest
    definition = SharedGroup("g")
    options = SubscriberOptions.check(group=definition, window=-1)
    assert (options.group, options.mode, options.definition) == ("g", "shared", definition)
    assert options.spec.window is None  # negative: the group's own


def test_functions_are_pickled_into_the_spec_and_the_options_are_frozen() -> None:
    options = SubscriberOptions.check(filter=lambda v: v > 1, on_poison="skip")
    assert isinstance(options.spec.filter, bytes) and options.spec.skip_poison
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.mode = "shared"  # type: ignore[misc]


def test_a_copy_holds_neither_the_listener_nor_the_definition_and_pickles() -> None:
    options = SubscriberOptions.check(group=SharedGroup("g"), on_ownership_change=print)
    copy = options.for_copy()
    assert (copy.listener, copy.definition) == (None, None)
    assert (copy.group, copy.mode, copy.spec) == (options.group, options.mode, options.spec)
    assert pickle.loads(pickle.dumps(copy)) == copy


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"cooperative": "yes"}, rt.InvalidTypeError),
        ({"group": ""}, rt.InvalidArgumentError),
        ({"mode": "both"}, rt.InvalidArgumentError),
        ({"group": SharedGroup("g"), "mode": "owned"}, rt.GroupModeError),
        ({"mode": "shared"}, rt.InvalidArgumentError),
        ({"start": "middle"}, rt.InvalidArgumentError),
        ({"filter": 3}, rt.InvalidTypeError),
        ({"window": 0}, rt.InvalidArgumentError),
        ({"resequence": "seq"}, rt.InvalidTypeError),
        ({"complete_on_empty": 1}, rt.InvalidTypeError),
        ({"timeout": 0}, rt.InvalidArgumentError),
        ({"on_poison": "drop"}, rt.InvalidArgumentError),
    ],
)
def test_a_bad_option_gets_its_typed_error(arguments: dict[str, object], error: type) -> None:
    with pytest.raises(error):
        SubscriberOptions.check(**arguments)  # type: ignore[arg-type]


def test_an_option_it_does_not_name_is_refused_as_python_refuses_a_keyword() -> None:
    # The options arrive as **options: a misspelt one must not be dropped quietly.
    with pytest.raises(TypeError, match="unexpected keyword argument 'gruop'"):
        SubscriberOptions.check(gruop="g")  # type: ignore[call-arg]
