"""A receive session's parts (see ``raytopic.actors.receive_session``, which composes them).

- :mod:`.planner`: which channels a receive takes from, in which order, how much
  from each (pure).
- :mod:`.ports`: how a session reads a channel: :class:`~.ports.ReaderPort`, in
  process for its home channel and by actor call for a sibling.
- :mod:`.loans`: what takes at siblings hold there until settled, and the
  give-backs of takes no receive returned.
- :mod:`.seek_barrier`: a seek waits for the receives sent before it, and no
  fetch takes until the seek has landed.
"""
