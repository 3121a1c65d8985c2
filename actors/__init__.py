"""Ray actors of raytopic: the channel actor, its ring buffer and stores."""
