"""What the handles, the actors and the coordinator all use: the wire protocol
(``raytopic.core.protocol``: every request, reply and the records they carry),
the payloads values travel as, records, errors, configuration, actor names,
shared-group definitions, the resequencer rules, acknowledgement requests, and
gathering results in order.

Layers point one way: ``raytopic.actors`` and ``raytopic.coordinator`` import this
package and never a handle module (``raytopic.client.topic``, ``raytopic.client.publisher``,
``raytopic.client.subscriber``, ...); the handles (``api/``, the package ``raytopic``) import
all three. This package imports only itself. Users import the
public names from ``raytopic`` (tests/test_layers.py checks the direction).
"""
