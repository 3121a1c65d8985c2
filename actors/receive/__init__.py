"""A receive session's parts (see ``raytopic.actors.receive_session``, which composes them).

- :mod:`.planner`: which channels a receive takes from, in which order, how much
  from each (pure).
- :mod:`.ports`: how a session reads a channel: :class:`~.ports.ReaderPort`, in
  process for its host channel and by actor call for a sibling.
- :mod:`.lending`: what takes at siblings hold there until settled, and the
  give-backs of takes no receive returned.
- :mod:`.pause`: a seek pauses its subscriber's receives: it waits for those
  sent before it, and no fetch takes until the seek has landed.
"""
