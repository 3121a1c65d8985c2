"""The ``raytopic`` command and what it runs: the CLI (:mod:`~raytopic.tools.cli`,
with its admin commands and tables), the benchmarks (``bench*``) and the demo
(``demo*``). Nothing here is imported by the library itself."""
