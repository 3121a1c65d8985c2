"""Transactions (``rt.transactions()``): the :class:`~raytopic.transaction.handles.Transaction`
handles that stage publishes and consumed commits, and the registry actor that fences
an older incarnation of a transactional id and decides each transaction's outcome."""
