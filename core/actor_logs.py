"""raytopic's INFO lines in its actors' logs.

Ray leaves Python's logging unconfigured in a worker process: the root logger at
WARNING with no handler, so only warnings reach the worker's ``.err`` log
(through logging's last resort) and raytopic's INFO lines (rebalances, timeouts,
resets, restarts) are dropped. Each raytopic actor calls :func:`log_info_here`
when it starts; a process whose logging someone configured is left alone.
"""

from __future__ import annotations

import logging

__all__ = ["log_info_here"]

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def log_info_here() -> None:
    """Send the ``raytopic`` loggers' INFO lines and up to this process's stderr
    (a Ray worker's ``.err`` log), unless logging here is configured already."""
    package = logging.getLogger("raytopic")
    if logging.getLogger().handlers or package.handlers or package.level != logging.NOTSET:
        return  # configured: by the user, or already here
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(FORMAT))
    package.addHandler(handler)
    package.setLevel(logging.INFO)
