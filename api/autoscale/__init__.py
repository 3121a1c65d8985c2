"""Elastic consumers (``Topic.autoscale``): the :class:`~raytopic.autoscale.autoscaler.Autoscaler`
handle, the detached scaler actor that follows a group's lag, and the member actors
it starts (each runs a subscriber of the group and the user's handler)."""
