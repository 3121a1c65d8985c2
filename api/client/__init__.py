"""The client handles: :class:`~raytopic.client.topic.Topic`, its publishers,
subscribers, ring buffers and table views, and the parts they are made of.

Users reach them as ``raytopic.Topic``, ``raytopic.Publisher``, ... Everything here
runs in the user's process (no actor class lives here) and imports only itself
and the layers below (``raytopic.coordinator``, ``raytopic.actors``,
``raytopic.core``), never an application built on it (``raytopic.autoscale``,
``raytopic.bridge``, ``raytopic.serve``, ``raytopic.transaction``,
``raytopic.tools``): tests/test_layers.py keeps it so.
"""
