"""The coordinator actor of a topic: subscriber groups, membership, assignment, resets."""
