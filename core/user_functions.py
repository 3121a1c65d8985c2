"""Users' functions that run in another process: pickled where they are given,
loaded where they run, with a typed error naming the argument either way.

Filters, converters and ``Resequence`` orders run in the channels; a store
factory runs in each channel as it opens its store. cloudpickle pickles a
function of an importable module *by reference* (its module and name), so the
process that loads it must be able to import that module: one defined in a
module only the driver has (a script's sibling file, a notebook's helper
module) pickles fine here and fails there. These helpers turn both failures
into raytopic's errors before anything durable is made with the function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cloudpickle

from raytopic.core.errors import InvalidArgumentError, InvalidTypeError

__all__ = ["PickledFunction", "call_user", "load_pickled", "name_of", "pickle_function"]

_WHERE_IT_MUST_BE = (
    "A function the channels run must be importable there: ship its module with the "
    "job's runtime_env (working_dir or py_modules), or have it pickled by value "
    "(cloudpickle.register_pickle_by_value(module))."
)


def pickle_function(function: Any, argument: str) -> bytes:
    """``function`` cloudpickled, to be loaded in another process.

    Args:
        function: A function (or any object) the channels will run.
        argument: Its argument's name, for the message.

    Returns:
        The pickled bytes.

    Raises:
        InvalidTypeError: it cannot be pickled (it holds a lock, a socket, ...).
    """
    try:
        return cloudpickle.dumps(function)
    except Exception as error:
        raise InvalidTypeError(
            f"{argument} could not be pickled to be sent to the channels: "
            f"{type(error).__name__}: {error}"
        ) from error


def load_pickled(pickled: bytes, argument: str) -> Any:
    """A function pickled by :func:`pickle_function`, loaded in this process.

    Args:
        pickled: What :func:`pickle_function` returned.
        argument: Its argument's name, for the message.

    Returns:
        The function (or object) again.

    Raises:
        InvalidArgumentError: it cannot be loaded here (its module is missing, ...).
    """
    try:
        return cloudpickle.loads(pickled)
    except Exception as error:
        raise InvalidArgumentError(
            f"{argument} could not be loaded in the channel: {type(error).__name__}: "
            f"{error}. {_WHERE_IT_MUST_BE}"
        ) from error


@dataclass(frozen=True, slots=True, repr=False)
class PickledFunction:
    """A function carried pickled, so that only the process that runs it loads it
    (every process holding a topic's configuration need not import its module)."""

    name: str
    """``module.qualname`` of the function, for messages."""
    argument: str
    """The argument it was given as (``store``, ...)."""
    pickled: bytes
    """The function, cloudpickled."""

    def __repr__(self) -> str:
        return f"PickledFunction({self.name})"

    @classmethod
    def of(cls, function: Callable[..., Any], argument: str) -> PickledFunction:
        """``function`` pickled now.

        Raises:
            InvalidTypeError: it cannot be pickled.
        """
        return cls(name_of(function), argument, pickle_function(function, argument))

    def load(self) -> Callable[..., Any]:
        """The function, loaded in this process.

        Raises:
            InvalidArgumentError: it cannot be loaded here.
        """
        return load_pickled(self.pickled, f"{self.argument} {self.name}")


def call_user(function: Callable[..., Any], argument: str, *args: Any) -> Any:
    """``function(*args)``, whatever it raises told as raytopic's error.

    SystemExit and KeyboardInterrupt included: a user's function that raises one
    must cost only its call, never the process (or thread) that runs it.

    Args:
        function: The user's function.
        argument: Its argument's name, for the message.
        *args: What it is called with.

    Raises:
        InvalidArgumentError: ``function`` raised (chained from what it raised).
    """
    try:
        return function(*args)
    except BaseException as error:
        raise InvalidArgumentError(
            f"{argument} {name_of(function)} raised {type(error).__name__}: {error}"
        ) from error


def name_of(function: Any) -> str:
    """``module.qualname`` of a function (or of a callable object's class)."""
    qualified = getattr(function, "__qualname__", None) or type(function).__qualname__
    module = getattr(function, "__module__", None)
    return f"{module}.{qualified}" if module else qualified
