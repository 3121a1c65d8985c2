"""A receive session's parts (see ``raytopic.actors.receive_session``, which composes them).

- :mod:`.view`: the channels the reader owns (with its leases) and the cursor
  state last seen at each (pure).
- :mod:`.planner`: which channels a receive takes from, in which order, how much
  from each (pure).
- :mod:`.takes`: carrying out that order: a take at one channel or several.
- :mod:`.ports`: how a session reads a channel: :class:`~.ports.ReaderPort`, in
  process for its host channel and by actor call for a sibling.
- :mod:`.positions`: where the session reads each channel (it owns its reader's
  read positions; every take names one, so nothing is lent or given back).
- :mod:`.waits`: watches and fetches at the siblings while a receive waits.
- :mod:`.pause`: a seek (or an iteration) pauses its subscriber's receives: it
  waits for those sent before it, and no fetch takes until the seek has landed.
- :mod:`.handover`: with a resequencer, what the session took and has not handed
  over yet; each element handed over is stamped with its hand-over mark, past
  which its commits do not go (pure).
"""
