"""The Spark and Ray Data bridge: Arrow rows in and out of topics in bulk.

Users import it as ``raytopic.spark`` and ``raytopic.data`` (small modules that
re-export :mod:`raytopic.bridge.spark` and :mod:`raytopic.bridge.data`); the
rest is internal: :mod:`~raytopic.client.bulk` (appends and range reads both
share), :mod:`~raytopic.client.arrow_tables` (routing and building tables, no
Ray) and :mod:`~raytopic.bridge.spark_session` (RayDP, Java, quiet JVMs).
"""
