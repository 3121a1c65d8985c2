"""The ``raytopic`` command: the demo, the benchmarks, and a running cluster's topics.

``demo`` and ``bench`` start an embedded local Ray unless ``--address`` names
a running cluster. The other commands attach to a running cluster
(``--address``, default ``auto``: ``RAY_ADDRESS``, else the cluster
``ray start`` left on this machine) in ``--namespace``; ``--json`` makes their
output pure JSON on stdout. A cluster with token authentication gets the
token from RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ``~/.ray/auth_token``
(``raytopic.client.cluster``). Options may come before or after the arguments, and
``--address``, ``--namespace`` and ``--json`` before the command too.

Exit codes: 0 ok, 1 failure (no cluster answering within seconds, a refused
token, a refused change), 2 usage (a bad option or value), 3 the topic or group
does not exist.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from raytopic.tools.bench import BenchSettings
    from raytopic.tools.bench_autoscale import AutoscaleSettings
    from raytopic.tools.bench_streams import StreamSettings
    from raytopic.tools.bench_tables import TableSettings

_LOOPBACK = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

OK, FAILURE, USAGE, NOT_FOUND = 0, 1, 2, 3


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``raytopic`` command."""
    args = _parse(argv)
    if os.environ.get(_LOOPBACK) is None and "ray" in sys.modules and argv is None:
        # Ray reads this when it is imported (and `import raytopic` imported it):
        # start again with it set, so a local Ray listens on loopback only.
        os.environ[_LOOPBACK] = "0"
        os.execv(sys.executable, [sys.executable, "-m", "raytopic.tools.cli", *sys.argv[1:]])
    os.environ.setdefault(_LOOPBACK, "0")
    import raytopic as rt

    try:
        return int(args.run(args) or 0)
    except (rt.TopicNotFoundError, rt.GroupNotFoundError) as error:
        return _fail(error, NOT_FOUND)
    except (rt.InvalidArgumentError, rt.InvalidTypeError) as error:
        return _fail(error, USAGE)
    except rt.TopicError as error:
        return _fail(error, FAILURE)


def _fail(error: Exception, code: int) -> int:
    print(f"raytopic: {error}", file=sys.stderr)
    return code


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line, with the defaults of the options that may also come before
    the command filled in here (a command's own default would overwrite a value
    given before it, so the parsers leave them unset)."""
    parser = _parser()
    args = parser.parse_args(argv)
    attaches = args.run is _admin
    for option in ("namespace", "json"):
        if not attaches and hasattr(args, option):
            parser.error(f"--{option} goes with the cluster commands, not {args.command}")
    args.address = getattr(args, "address", "auto" if attaches else None)
    args.namespace = getattr(args, "namespace", None)
    args.json = getattr(args, "json", False)
    return args


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="raytopic",
        description=__doc__.splitlines()[0],
        epilog="exit codes: 0 ok, 1 failure, 2 usage, 3 topic or group not found",
    )
    _cluster_options(
        parser, "the cluster (default: auto for the cluster commands, a local Ray for demo, bench)"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="run the main job end to end on a local Ray")
    demo.add_argument("--rows", type=int, default=1_000_000, help="orders to publish")
    demo.add_argument(
        "--no-spark",
        dest="spark",
        action="store_false",
        help="publish from a Python Publisher instead of Spark (quicker to start)",
    )
    _address_option(demo, "a running Ray cluster (default: a local one)")
    demo.set_defaults(run=_demo)

    bench = commands.add_parser("bench", help="measure throughput, latency and memory")
    bench.add_argument(
        "--quick",
        action="store_true",
        help="smaller counts, the same cases, for a quicker check (the options below still apply)",
    )
    # Defaults are None so that an option given overrides --quick; the counts
    # themselves live in raytopic.tools.bench (DEFAULT, QUICK), not here.
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
        help="the Spark bridge cases instead (RayDP's conversions as baselines; --messages rows),"
        " and rt.spark.stream's catch-up vs read_topic(spark) (alone with --streams)",
    )
    bench.add_argument(
        "--shared",
        action="store_true",
        help="only the shared-group cases (4 shared members vs 2 owned, 2 channels)",
    )
    bench.add_argument(
        "--scale",
        action="store_true",
        help="only the scale case (K producers -> K channels -> K members, K = 1 and --channels,"
        " against K Queues and K floor pairs)",
    )
    bench.add_argument(
        "--autoscale",
        action="store_true",
        help="only the autoscale case (idle -> burst -> idle, autoscaled from 0 vs pools of 8"
        " and 1) and Serve's task consumer on topics vs Celery on redis",
    )
    bench.add_argument(
        "--latency",
        action="store_true",
        help="only the latency case (publish -> a waiting receive on 1 channel and --channels,"
        " against Queue's put -> a waiting get, interleaved; the median of --repeat runs)",
    )
    bench.add_argument(
        "--streams",
        action="store_true",
        help="only the streams case (a stream's catch-up in batches vs one bounded read_topic,"
        " and publish -> batch in hand at 5,000 rows/s vs a plain member)",
    )
    bench.add_argument(
        "--compaction",
        action="store_true",
        help="only the table view and compaction cases (a new table() on a compacted topic vs"
        " the same updates not compacted, publish() while compacting, store bytes, publish ->"
        " a view's listener vs a waiting receive)",
    )
    bench.add_argument(
        "--transactions",
        action="store_true",
        help="only the transactions case (a transaction per batch of 100 vs publish + commit)",
    )
    bench.add_argument(
        "--idle",
        action="store_true",
        help="only the idle case (idle CPU and topic creation against bare Ray actors)",
    )
    bench.add_argument("--idle-topics", type=int, help="of the idle case; 0 skips it (3; quick 1)")
    bench.add_argument(
        "--idle-seconds", type=float, help="the idle case's CPU window (20; quick 5)"
    )
    _address_option(bench, "a running Ray cluster (default: a local one)")
    bench.set_defaults(run=_bench)

    _admin_commands(commands)
    return parser


def _admin_commands(commands: argparse._SubParsersAction) -> None:
    """The commands that attach to a running cluster, each with the shared options."""
    cluster = argparse.ArgumentParser(add_help=False)
    _cluster_options(cluster, "the cluster (default auto: RAY_ADDRESS, else the local one)")

    def command(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, parents=[cluster])
        sub.set_defaults(run=_admin)
        return sub

    command("list", "list the topics of a namespace")
    create = command("create", "create a topic")
    create.add_argument("topic", type=_name("topic"))
    create.add_argument("--channels", type=int, default=8)
    create.add_argument("--capacity", type=int, default=1_000_000)
    create.add_argument("--retain", action="store_true", help="keep committed elements")
    create.add_argument("--ttl", type=float, default=None, help="seconds an element lives")
    create.add_argument("--overflow", choices=("block", "overwrite", "fail"), default="block")
    create.add_argument(
        "--store", type=_store, default=None, help="a directory: the embedded store"
    )
    create.add_argument(
        "--group",
        type=_name("group"),
        action="append",
        metavar="G",
        help="a durable group (may repeat)",
    )
    create.add_argument(
        "--compact",
        action="store_true",
        help="a compacted topic: only each key's latest value is kept (retained, keyed)",
    )
    for flag, default, what in (
        ("--min-lag", 0.0, "seconds an element stays uncompacted"),
        ("--max-lag", 60.0, "seconds until every element is eligible, quiet topic too"),
        ("--tombstone-retention", 86_400.0, "seconds a delete stays once eligible"),
    ):
        create.add_argument(
            flag,
            type=float,
            default=None,
            metavar="S",
            help=f"with --compact: {what} ({default:g})",
        )
    command("describe", "channels and groups of a topic").add_argument("topic", type=_name("topic"))
    tail = command("tail", "print elements, one JSON value per line")
    tail.add_argument("topic", type=_name("topic"))
    tail.add_argument(
        "--group", type=_name("group"), default=None, help="from where this group committed"
    )
    tail.add_argument(
        "--from",
        dest="start",
        type=_start,
        default="earliest",
        metavar="earliest|latest|ISO-TIME",
        help="where to start (default earliest)",
    )
    tail.add_argument("-n", type=int, default=None, help="stop after N elements")
    tail.add_argument("--follow", action="store_true", help="keep printing new elements")
    command("groups", "the groups of a topic").add_argument("topic", type=_name("topic"))
    reset = command("reset-group", "move a group's read and commit positions")
    reset.add_argument("topic", type=_name("topic"))
    reset.add_argument("group", type=_name("group"))
    reset.add_argument(
        "--to",
        required=True,
        type=_reset_target,
        metavar="earliest|latest|ISO-TIME|CH:SEQ[,CH:SEQ...]",
        help="where the group goes on (CH:SEQ: channel CH after sequence SEQ)",
    )
    delete = command("delete", "destroy a topic and everything in it")
    delete.add_argument("topic", type=_name("topic"))
    delete.add_argument("--yes", action="store_true", help="do not ask")


def _cluster_options(parser: argparse.ArgumentParser, address_help: str) -> None:
    """--address, --namespace, --json: left unset when not given (see :func:`_parse`)."""
    _address_option(parser, address_help)
    parser.add_argument(
        "--namespace",
        type=_name("namespace"),
        default=argparse.SUPPRESS,
        help="of the topics (default raytopic)",
    )
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="pure JSON on stdout"
    )


def _address_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument(
        "--address",
        type=_address,
        default=argparse.SUPPRESS,
        metavar="HOST:PORT|auto",
        help=help_text,
    )


def _address(text: str) -> str:
    """--address: checked before anything connects, so a malformed one is a usage error."""
    from raytopic.client.cluster import parse_address

    if text == "auto":
        return text
    try:
        return parse_address(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected HOST:PORT (e.g. 127.0.0.1:6379) or auto, got {text!r}"
        ) from None


def _name(what: str) -> Callable[[str], str]:
    """A topic, group or namespace name's check: a bad one ('' and blanks too) is a
    usage error before anything connects (a lookup would say "not found": exit 3)."""

    def checked(text: str) -> str:
        from raytopic.core.config import check_name  # imports no Ray
        from raytopic.core.errors import InvalidArgumentError

        try:
            return check_name(text, what)
        except InvalidArgumentError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return checked


def _store(text: str) -> str:
    """--store: a directory; an empty or blank one is a usage error."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"expected a directory, got {text!r}")
    return text


def _start(text: str) -> str | datetime:
    """tail --from: "earliest", "latest" or an ISO time."""
    if text in ("earliest", "latest"):
        return text
    return _moment(text, "earliest, latest or an ISO time")


def _reset_target(text: str) -> str | datetime | dict[int, int]:
    """reset-group --to: "earliest", "latest", an ISO time, or CH:SEQ pairs as a
    {channel: sequence} dict."""
    if text in ("earliest", "latest"):
        return text
    pairs: dict[int, int] = {}
    try:
        for pair in text.split(","):
            channel, sequence = pair.split(":")
            if int(channel) in pairs:  # which one was meant? (else the last one won)
                raise argparse.ArgumentTypeError(
                    f"channel {int(channel)} is given twice in {text!r}"
                )
            pairs[int(channel)] = int(sequence)
    except ValueError:  # not pairs: an ISO time (which has colons too), or nothing valid
        return _moment(text, "earliest, latest, an ISO time or CH:SEQ[,CH:SEQ...]")
    return pairs


def _moment(text: str, forms: str) -> datetime:
    """An ISO time (UTC when it names no zone); else a usage error listing ``forms``."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {forms}, got {text!r}") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _admin(args: argparse.Namespace) -> int:
    if getattr(args, "n", None) is not None and args.n < 0:
        return _fail(ValueError(f"-n must be >= 0, got {args.n}"), USAGE)
    _connect(args.address)
    from raytopic.tools.cli_admin import COMMANDS

    return COMMANDS[args.command](args)


def _connect(address: str | None) -> None:
    """Join the cluster at ``address`` ("auto" or HOST:PORT; None: start an embedded
    local one), sending its token when it asks for one.

    Raises:
        ClusterUnreachableError: No cluster answers there (within seconds, not Ray's
            minute of retries).
        ClusterAuthError: The cluster asks for a token this machine lacks or refuses it.
        InvalidArgumentError: RAY_ADDRESS is not HOST:PORT.
    """
    import ray

    if address is None:
        from raytopic.tools.bench import local_ray

        local_ray()
        return
    from raytopic.client.cluster import prepare, resolve_address
    from raytopic.tools.quiet_kills import driver_reports_off

    resolved = resolve_address(address)
    if ray.is_initialized() and ray.get_runtime_context().gcs_address == resolved:
        # Called from Python (main([...])) in a process already joined to this
        # cluster: keep that connection (a second ray.init would refuse).
        return
    prepare(resolved)
    try:
        ray.init(address=resolved, log_to_driver=False, logging_level=logging.WARNING)
    except ConnectionError as error:
        raise SystemExit(f"raytopic: no Ray cluster at {resolved!r}: {error}") from None
    # Ray prints the raylet's reports to every driver on stdout, log_to_driver=False or
    # not; this command's stdout is its output (JSON lines a pipe reads).
    driver_reports_off()


def _demo(args: argparse.Namespace) -> int:
    if args.spark:
        _spark_ready()
    _connect(args.address)
    from raytopic.tools.demo import run_demo

    return 0 if run_demo(args.rows, spark=args.spark) else 1


def _spark_ready() -> None:
    """Java on this process's PATH before Ray starts (its node looks for Java once),
    or a clear exit when the Spark extra or Java is missing."""
    try:
        import pyspark  # noqa: F401
        import raydp  # noqa: F401

        from raytopic.bridge.spark_session import JavaNotFoundError, prepare_java
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
    from raytopic.tools.bench import DEFAULT, QUICK

    chosen = {
        field.name: getattr(args, field.name)
        for field in fields(DEFAULT)
        if getattr(args, field.name) is not None
    }
    return replace(QUICK if args.quick else DEFAULT, **chosen)


def _autoscale_settings(args: argparse.Namespace) -> AutoscaleSettings:
    """The autoscale case's counts: smaller with ``--quick``."""
    from raytopic.tools.bench_autoscale import QUICK_AUTOSCALE, AutoscaleSettings

    return QUICK_AUTOSCALE if args.quick else AutoscaleSettings()


def _stream_settings(args: argparse.Namespace) -> StreamSettings:
    """The streams case's counts: smaller with ``--quick``."""
    from raytopic.tools.bench_streams import QUICK_STREAMS, StreamSettings

    return QUICK_STREAMS if args.quick else StreamSettings()


def _table_settings(args: argparse.Namespace) -> TableSettings:
    """The table and compaction cases' counts: smaller with ``--quick``; ``--channels``
    and ``--latency-samples`` apply."""
    from raytopic.tools.bench_tables import QUICK_TABLES, TableSettings

    chosen = {
        name: getattr(args, name)
        for name in ("channels", "latency_samples")
        if getattr(args, name) is not None
    }
    return replace(QUICK_TABLES if args.quick else TableSettings(), **chosen)


def _bench(args: argparse.Namespace) -> int:
    settings = _bench_settings(args)
    if args.spark:
        _spark_ready()
    _connect(args.address)
    from raytopic.tools.bench import (
        Figure,
        format_figure,
        format_header,
        format_verdict,
        run_benchmarks,
    )

    print(format_header())
    figures: list[Figure] = []

    def report(figure: Figure) -> None:
        figures.append(figure)
        print(format_figure(figure), flush=True)

    if args.spark and args.streams:
        from raytopic.tools.bench_spark import run_spark_stream_benchmarks

        run_spark_stream_benchmarks(rows=settings.messages, repeat=settings.repeat, report=report)
    elif args.spark:
        from raytopic.tools.bench_spark import run_spark_benchmarks

        run_spark_benchmarks(rows=settings.messages, repeat=settings.repeat, report=report)
    elif args.shared:
        from raytopic.tools.bench_shared import run_shared_benchmarks

        run_shared_benchmarks(messages=settings.messages, repeat=settings.repeat, report=report)
    elif args.scale:
        from raytopic.tools.bench_scale import run_scale_benchmarks

        run_scale_benchmarks(
            messages=settings.messages,
            channels=settings.channels,
            repeat=settings.repeat,
            report=report,
        )
    elif args.autoscale:
        from raytopic.tools.bench_autoscale import run_autoscale_benchmarks

        run_autoscale_benchmarks(_autoscale_settings(args), report=report)
    elif args.latency:
        from raytopic.tools.bench_latency import run_latency_benchmarks

        run_latency_benchmarks(
            samples=settings.latency_samples,
            channels=settings.channels,
            repeat=settings.repeat,
            report=report,
        )
    elif args.streams:
        from raytopic.tools.bench_streams import run_stream_benchmarks

        run_stream_benchmarks(_stream_settings(args), repeat=settings.repeat, report=report)
    elif args.compaction:
        from raytopic.tools.bench_tables import run_table_benchmarks

        run_table_benchmarks(_table_settings(args), repeat=settings.repeat, report=report)
    elif args.transactions:
        from raytopic.tools.bench_transactions import run_transaction_benchmarks

        run_transaction_benchmarks(
            messages=settings.messages, repeat=settings.repeat, report=report
        )
    elif args.idle:
        from raytopic.tools.bench_idle import run_idle_benchmarks

        run_idle_benchmarks(
            topics=settings.idle_topics,
            channels=settings.channels,
            seconds=settings.idle_seconds,
            report=report,
        )
    else:
        run_benchmarks(
            **asdict(settings),
            streams=_stream_settings(args),
            autoscale=_autoscale_settings(args),
            tables=_table_settings(args),
            report=report,
        )
    print(format_verdict(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
