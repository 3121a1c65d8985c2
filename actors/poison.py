"""Poison elements: elements a reader cannot be handed, and how a cursor stops before one. No Ray.

An element is *poison* for a reader when it cannot be decoded where it is
delivered (its class is missing or changed in the consumer's process), or
when the reader's own filter or converter raises on it. It costs only
itself:

- The receive that meets it delivers what came before it; the reader's
  cursor stays before it (it is not delivered: not committed, still counted
  by ``remaining_messages`` and lag).
- The reader is told once, by a :class:`~raytopic.core.errors.PoisonElementError`
  naming the channel, the position and the cause; from then on its cursor
  *stops* there (the channel holds nothing more for it: no error on every
  later receive) until the reader skips it deliberately: a ``seek`` past it,
  or a subscriber made with ``on_poison="skip"``, whose channel logs such an
  element, counts it (``raytopic_poison_skipped``) and reads on.
- A shared group's member negatively acknowledges it instead (the group's
  dead letters take it after ``max_deliveries``).

A channel finds the failures of the user's functions itself; a decoding
failure is found where the reply is decoded (the subscriber's process, or a
task the receive's ObjectRef was handed to), which reports it to the channel
(``raytopic.core.protocol.replies``); what makes an element poison travels
as a :class:`~raytopic.core.protocol.Poison`.
"""

from __future__ import annotations

from dataclasses import dataclass

from raytopic.core.protocol import Poison

__all__ = ["PoisonMark"]


@dataclass(slots=True)
class PoisonMark:
    """Where a cursor stops: a poison element, until the cursor jumps (a seek, a
    reset, a new owner) or the element is skipped."""

    poison: Poison
    jumps: int
    """The cursor's jump count when it was marked: any later jump voids the mark."""
    reported: bool
    """Whether the reader was told (a take raised it once)."""
    read_under: int
    """The jump count of the reads the stop leaves standing: those of the elements
    before the poison, delivered before the stop moved the read position back."""
