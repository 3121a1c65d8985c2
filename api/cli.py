"""The ``raytopic`` command: demo, bench, and a look at a cluster's topics.

``raytopic demo`` and ``raytopic bench`` start an embedded local Ray unless
``--address`` names a running cluster; ``list`` and ``describe`` attach to a
running cluster (``--address``, default ``auto``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, fields, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raytopic.bench import BenchSettings

_LOOPBACK = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``raytopic`` command."""
    args = _parser().parse_args(argv)
    if os.environ.get(_LOOPBACK) is None and "ray" in sys.modules and argv is None:
        # Ray reads this when it is imported (and `import raytopic` imported it):
        # start again with it set, so a local Ray listens on loopback only.
        os.environ[_LOOPBACK] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "raytopic.cli", *sys.argv[1:]])
    os.environ.setdefault(_LOOPBACK, "0")
    return int(args.run(args) or 0)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="raytopic", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="run a topic end to end on a local Ray")
    demo.add_argument("--rows", type=int, default=1_000_000, help="orders to publish")
    demo.add_argument(
        "--no-spark",
        dest="spark",
        action="store_false",
        help="publish from a Python Publisher instead of Spark (quicker to start)",
    )
    demo.add_argument("--address", default=None, help="a running Ray cluster (default: local)")
    demo.set_defaults(run=_demo)

    bench = commands.add_parser("bench", help="measure throughput, latency and memory")
    bench.add_argument(
        "--quick",
        action="store_true",
        help="smaller counts, the same cases: about 30 s (the options below still apply)",
    )
    # Defaults are None so that an option given overrides --quick; the counts
    # themselves live in raytopic.bench (DEFAULT, QUICK), not here.
    bench.add_argument("--messages", type=int, help="per throughput run (1,000,000; quick 100,000)")
    bench.add_argument("--channels", type=int, help="of the multi-channel cases (8)")
    bench.add_argument("--latency-samples", type=int, help="per latency case (300; quick 50)")
    bench.add_argument("--repeat", type=int, help="runs per case, median reported (3; quick 1)")
    bench.add_argument(
        "--memory-elements", type=int, help="in the memory case (1,000,000; quick 100,000)"
    )
    bench.add_argument(
        "--restart-elements",
        type=int,
        help="on disk in the restart case; 0 skips the store cases (1,000,000; quick 100,000)",
    )
    bench.add_argument(
        "--spark",
        action="store_true",
        help="the Spark bridge cases instead (RayDP's conversions as baselines; --messages rows)",
    )
    bench.add_argument("--address", default=None, help="a running Ray cluster (default: local)")
    bench.set_defaults(run=_bench)

    for name, run, help_text in (
        ("list", _list, "list the topics of a namespace"),
        ("describe", _describe, "channels and groups of a topic"),
    ):
        command = commands.add_parser(name, help=help_text)
        if name == "describe":
            command.add_argument("topic")
        command.add_argument("--namespace", default=None)
        command.add_argument("--address", default="auto")
        command.add_argument("--json", action="store_true", help="machine-readable output")
        command.set_defaults(run=run)
    return parser


def _connect(address: str | None) -> None:
    import ray

    if address is None:
        from raytopic.bench import local_ray

        local_ray()
        return
    try:
        ray.init(address=address, log_to_driver=False)
    except ConnectionError as error:
        raise SystemExit(f"raytopic: no Ray cluster at {address!r}: {error}") from None


def _demo(args: argparse.Namespace) -> int:
    if args.spark:
        _spark_ready()
    _connect(args.address)
    from raytopic.demo import run_demo

    return 0 if run_demo(args.rows, spark=args.spark) else 1


def _spark_ready() -> None:
    """Java on this process's PATH before Ray starts (its node looks for Java once),
    or a clear exit when the Spark extra or Java is missing."""
    try:
        import pyspark  # noqa: F401
        import raydp  # noqa: F401

        from raytopic.spark_session import JavaNotFoundError, prepare_java
    except ImportError as error:
        raise SystemExit(
            f"raytopic: Spark is not installed ({error}): pip install 'raytopic[spark]', "
            "or run without Spark: --no-spark"
        ) from None
    try:
        prepare_java()
    except JavaNotFoundError as error:
        raise SystemExit(f"raytopic: {error}") from None


def _bench_settings(args: argparse.Namespace) -> BenchSettings:
    """``--quick`` or the full settings, with each option given on top."""
    from raytopic.bench import DEFAULT, QUICK

    chosen = {
        field.name: getattr(args, field.name)
        for field in fields(DEFAULT)
        if getattr(args, field.name) is not None
    }
    return replace(QUICK if args.quick else DEFAULT, **chosen)


def _bench(args: argparse.Namespace) -> int:
    settings = _bench_settings(args)
    if args.spark:
        _spark_ready()
    _connect(args.address)
    from raytopic.bench import format_figure, format_header, run_benchmarks

    print(format_header())
    if args.spark:
        from raytopic.bench_spark import run_spark_benchmarks

        run_spark_benchmarks(
            rows=settings.messages,
            repeat=settings.repeat,
            report=lambda figure: print(format_figure(figure), flush=True),
        )
        return 0
    run_benchmarks(
        **asdict(settings),
        report=lambda figure: print(format_figure(figure), flush=True),
    )
    return 0


def _list(args: argparse.Namespace) -> int:
    _connect(args.address)
    import raytopic as rt

    names = rt.list_topics(namespace=args.namespace)
    print(json.dumps(names) if args.json else "\n".join(names))
    return 0


def _describe(args: argparse.Namespace) -> int:
    _connect(args.address)
    import raytopic as rt

    try:
        stats = rt.get_topic(args.topic, namespace=args.namespace).describe()
    except rt.TopicNotFoundError as error:
        print(f"raytopic: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(asdict(stats), default=str, indent=2))
        return 0
    print(f"topic {stats.name} (id {stats.topic_id})")
    print(f"{'channel':>7} {'head':>10} {'tail':>10} {'size':>10} {'epoch':>5} {'pid':>8} state")
    for channel in stats.channels:
        # A channel that did not answer has no figures (None): shown as "-".
        head, tail, size = (
            "-" if figure is None else str(figure)
            for figure in (channel.head, channel.tail, channel.size)
        )
        print(
            f"{channel.channel:>7} {head:>10} {tail:>10} {size:>10} "
            f"{channel.epoch:>5} {channel.pid:>8} {channel.state}"
        )
    for group in stats.groups.values():
        print(
            f"group {group.name}: generation {group.generation}, depth {group.depth}, "
            f"unacked {group.unacked}, lag {group.lag}"
        )
        for member in group.members:
            print(f"  member {member.member_id[:12]} channels {list(member.channels)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
