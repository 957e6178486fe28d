"""Command line: ``attnsim run|list|show|ui|server|cache|explore|finetune|sweep|compare|report``.

This module owns every argument parser and every line printed for the user; the
workflows (:mod:`attnsim.workflows`) and analyses (:mod:`attnsim.analysis`) it calls
return result objects and print nothing. The parsers import only argparse, so that
``attnsim list`` and ``show`` import no heavy library; each command imports its
workflow when it runs.

Bad input (an :class:`~attnsim.errors.AttnsimError`) prints one paragraph,
``error: ...``, with no traceback, and exits with status 2. ``attnsim sweep`` exits 3
(:data:`EXIT_UNREADABLE`) when it finished but skipped checkpoints it could not read.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import Any, List, Optional

from attnsim.errors import AttnsimError
from attnsim.printed import format_finetune, format_sweep
from attnsim.quiet import quiet_libraries

DEFAULT_FINETUNE = "finetune_bbc"  # attnsim.workflows.finetune.DEFAULT_EXPERIMENT (not imported: it is heavy)


def _cmd_list(args: argparse.Namespace) -> int:
    from attnsim.config import list_experiments

    experiments = list_experiments()
    width = max((len(n) for n in experiments), default=0)
    for name, description in experiments.items():
        print(f"{name:<{width}}  {description}")
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from attnsim.config import load_config, to_yaml
    from attnsim.findings.registry import FINDINGS

    print(to_yaml(load_config(args.experiment, args.overrides, known_findings=FINDINGS)), end="")
    return 0


def _checked_config(experiment: str, overrides: List[str], **checks: Any) -> Any:
    """The config of ``experiment`` with ``overrides``, and every refusal that needs no model
    (:func:`attnsim.workflows.preflight.preflight`, given ``checks``), before torch, Lightning, transformers and MLflow load."""
    from attnsim.config import load_config
    from attnsim.findings.registry import FINDINGS
    from attnsim.workflows.preflight import preflight

    cfg = load_config(experiment, overrides, known_findings=FINDINGS)
    preflight(cfg, **checks)
    return cfg


def _cmd_run(args: argparse.Namespace) -> int:
    configured = time.perf_counter()
    cfg = _checked_config(args.experiment, _with_uri(args.overrides, args.uri))  # config errors and missing paths come before the heavy imports
    imported = time.perf_counter()
    from attnsim.workflows.startup import freeze_at_exit, import_libraries, process_settings

    process_settings()  # before torch loads: freed heap memory kept for reuse, a short OpenMP spin
    import_libraries()  # torch, Lightning, transformers, MLflow, with the garbage collector paused
    freeze_at_exit()
    quiet_libraries(args.verbose)
    from attnsim.keys import Stage
    from attnsim.tracking.links import open_hint
    from attnsim.workflows.run import execute, prepare

    timings = {Stage.IMPORTS.value: time.perf_counter() - imported, Stage.CONFIG.value: imported - configured}
    result = execute(prepare(cfg), started=args.started, timings=timings)
    if result.rank:  # DDP: a process of rank > 0 (re-running this command) logged nothing; rank 0 prints the run
        return 0
    print(f"\nrun id: {result.run_id}  (experiment id {result.experiment_id}, {result.windows} window{'' if result.windows == 1 else 's'})")
    print(f"tracking store: {result.tracking_uri}")
    print(open_hint(result.tracking_uri, result.experiment_id, result.run_id))
    return 0


def _cmd_cache(args: argparse.Namespace) -> int:
    from attnsim.capture.gguf import cache_entries, cache_root, clear_cache

    if args.action == "clear":
        freed = clear_cache()
        print(f"cleared {cache_root() / 'models'} ({freed / 2**20:,.0f} MiB freed)")
        return 0
    entries = cache_entries()
    print(f"cache: {cache_root()} (set ATTNSIM_CACHE to move it)")
    if not entries:
        print("no converted models")
    for entry in entries:
        state = "" if entry.complete else "  (incomplete: removed by the next conversion or `attnsim cache clear`)"
        print(f"{entry.bytes / 2**20:8,.0f} MiB  {entry.path.name}  from {entry.source}{state}")
    return 0


def _with_uri(overrides: List[str], uri: Optional[str]) -> List[str]:
    """``overrides`` plus ``tracking.uri=URI`` when ``--uri`` was given (it wins over the config and $MLFLOW_TRACKING_URI)."""
    return list(overrides) + ([f"tracking.uri={uri}"] if uri is not None else [])


def _add_uri(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--uri",
        default=None,
        help="tracking URI, e.g. http://127.0.0.1:5000 (`attnsim server`) or sqlite:///PATH/mlflow.db (default: tracking.uri, else $MLFLOW_TRACKING_URI, else ./mlruns/mlflow.db)",
    )


def _cmd_server(args: argparse.Namespace) -> int:
    from attnsim.tracking.server import serve

    backend = args.backend_store_uri or os.environ.get("ATTNSIM_BACKEND_STORE_URI")
    if not backend:
        raise AttnsimError(
            "`attnsim server` needs its PostgreSQL backend store: pass --backend-store-uri postgresql://USER@HOST:PORT/DB (or set ATTNSIM_BACKEND_STORE_URI). Create the database first with `createdb DB`."
        )
    return serve(backend, args.artifacts_destination, args.host, args.port, say=lambda line: print(line, flush=True))


def _cmd_ui(args: argparse.Namespace) -> int:
    from attnsim.tracking.store import resolve_uri
    from attnsim.tracking.ui import serve

    return serve(resolve_uri(args.uri), args.port, verbose=args.verbose, say=lambda line: print(line, flush=True))


def _cmd_explore(args: argparse.Namespace) -> int:
    _checked_config("attention_maps", args.overrides, store=False)  # config errors and missing paths before the heavy imports
    from attnsim.explore.server import check_port

    check_port(args.port, args.host)  # a port in use is said before the model loads
    quiet_libraries(args.verbose)
    from attnsim.explore.context import corpus_context
    from attnsim.explore.server import create_app, serve
    from attnsim.explore.session import Explorer
    from attnsim.tracking.store import resolve_uri

    explorer = Explorer.load(args.overrides)
    info = explorer.describe()
    print(
        f"loaded {info['model']} ({info['layers']} layers x {info['heads']} heads, {info['kind']}) in {explorer.load_seconds:.1f} s; texts up to {info['max_tokens']} tokens",
        flush=True,
    )
    explorer.analyse("The first pass compiles the statistics' kernels.", 0, 0)  # warm-up: the first text is not slower than the rest
    context, refused = None, None
    uri = resolve_uri(args.uri)
    if args.run:
        try:
            context = corpus_context(args.run, explorer.info, uri)
            print(f"corpus context: run {context['name']} ({len(context['stats'])} per-head statistics)", flush=True)
        except AttnsimError as exc:  # shown on the page too; the server runs without it
            refused = str(exc)
            print(f"warning: {refused} The explorer starts without corpus context; the page says so too.", file=sys.stderr, flush=True)
    app = create_app(explorer, context, refused, uri, text=args.text)
    return serve(app, args.host, args.port, say=lambda line: print(line, flush=True))


def _cmd_finetune(args: argparse.Namespace) -> int:
    experiment, overrides = args.experiment, list(args.overrides)
    if "=" in experiment:  # `attnsim finetune trainer.max_steps=10`: no experiment named
        experiment, overrides = DEFAULT_FINETUNE, [experiment] + overrides
    overrides = _with_uri(overrides, args.uri)
    _checked_config(experiment, overrides)
    quiet_libraries(args.verbose)
    from attnsim.workflows.finetune import finetune

    result = finetune(experiment, overrides)
    print("\n" + format_finetune(result))
    return 0


def _cmd_sweep(args: argparse.Namespace) -> int:
    overrides = _with_uri(list(args.overrides) + list(getattr(args, "trailing_overrides", []) or []), args.uri)
    _checked_config(args.experiment, overrides, checkpoints=args.checkpoints, base=args.base)
    quiet_libraries(args.verbose)
    from attnsim.tracking.links import open_hint
    from attnsim.workflows.sweep import sweep

    result = sweep(args.experiment, args.checkpoints, overrides, args.base, args.jobs)
    print("\n" + format_sweep(result, args.jobs))
    print(f"tracking store: {result.tracking_uri}")
    print(open_hint(result.tracking_uri, result.experiment_id, result.parent_run_id))
    return EXIT_UNREADABLE if int(result.runs["status"].str.startswith("unreadable").sum()) else 0


EXIT_UNREADABLE = 3  # `attnsim sweep`: the sweep finished, but some checkpoints could not be read and were skipped

# the attnsim modules each command that reads runs imports first (with its libraries: :func:`_start_reading`)
READING_MODULES = {"report": ("attnsim.analysis.report", "markdown_it"), "compare": ("attnsim.analysis.compare",), "runs": ("attnsim.analysis.listing",)}


def _start_reading(args: argparse.Namespace) -> None:
    """A lean start for ``report``, ``compare`` and ``runs``, as ``run`` has (:mod:`attnsim.workflows.startup`).

    MLflow, its SQL tracking store (unless the store is a server: ``http(s)://``), the command's own
    modules and, for a comparison that is logged, its figures' module are imported with the garbage
    collector paused and then frozen, and the process exits without collecting them again: about a
    third of such a command's time went to those collections (docs/performance.md, "Commands that
    read runs"). Nothing else changes; the Python API (:func:`attnsim.report`) does none of this.
    """
    from attnsim.tracking.links import is_server
    from attnsim.tracking.store import resolve_uri
    from attnsim.workflows.startup import freeze_at_exit, import_libraries

    names = ["mlflow"] + ([] if is_server(resolve_uri(args.uri)) else ["mlflow.store.tracking.sqlalchemy_store"])
    names += READING_MODULES[args.command]
    if args.command == "compare" and not args.no_log:
        names.append("attnsim.plots.compare")
    import_libraries(names)
    freeze_at_exit()


def _cmd_compare(args: argparse.Namespace) -> int:
    from attnsim.analysis.compare import compare, format_table
    from attnsim.tracking.links import open_hint

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no progress bars in the table's output, as report
    table = compare(args.run_ids, args.experiment, args.parent, args.force, args.csv, not args.no_log, args.log_experiment, args.uri)
    print("columns:")
    for row in table.attrs["runs"]:
        step = f", step {row['global_step']}" if row.get("global_step") is not None else ""
        measured = ", ".join(f"{name} {row[key]}" for name, key in (("capture", "capture_path"), ("statistics", "statistics_path")) if row.get(key))
        print(
            f"  {row['column']}: run {row['run_id']} - model {row['model']}{step}, corpus {row['corpus']} ({row['windows']} windows of {row['seq_len']} tokens)"
            + (f"; {measured}" if measured else "")
        )
    print()
    print(format_table(table))
    if table.attrs["differences"]:
        print("\nforced despite: " + "; ".join(table.attrs["differences"]))
    if args.csv:
        print(f"\ntable written to {args.csv}")
    if "comparison_run_id" in table.attrs:
        print(f"comparison run: {table.attrs['comparison_run_id']} (experiment '{args.log_experiment}': comparison.csv, runs.csv, figures/compare/*.png)")
        print(open_hint(table.attrs["tracking_uri"], table.attrs["comparison_experiment_id"], table.attrs["comparison_run_id"]))
    return 0


def _cmd_runs(args: argparse.Namespace) -> int:
    from attnsim.analysis.listing import describe_run, format_run, format_runs, list_runs

    if len(args.run_id) > 1:
        raise AttnsimError(
            f"attnsim runs prints one run at a time; got {len(args.run_id)} run ids. `attnsim compare {' '.join(args.run_id)}` puts runs side by side."
        )
    if args.run_id:
        print(format_run(describe_run(args.run_id[0], args.uri)))
    else:
        import shutil

        # a terminal's width ($COLUMNS first); piped output keeps one line per run, for grep and awk
        width = shutil.get_terminal_size().columns if sys.stdout.isatty() or os.environ.get("COLUMNS") else None
        print(format_runs(list_runs(args.uri, args.experiment, args.limit), width))
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from attnsim.analysis.report import (
        glance_text,
        load_runs,
        report_paths,
        write_files,
    )
    from attnsim.tracking.links import open_hint

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no progress bars in the report's output
    path, html_path = report_paths(args.run_ids, args.out)
    tracking_uri, runs = load_runs(args.run_ids, args.uri)
    write_files(runs, path, html_path, not args.no_log)
    print("verdicts at a glance:\n")
    print(glance_text(runs))
    print(f"report written to {path} and {html_path}" + ("" if args.no_log else f", and logged to {len(runs)} run(s) under reports/"))
    if not args.no_log:
        for run in runs:
            print(f"{run.name} {run.run_id[:8]}: " + open_hint(tracking_uri, run.experiment_id, run.run_id, artifact=f"reports/{path.name}"))
    return 0


class _CheckpointsAndOverrides(argparse.Action):
    """``--checkpoints SOURCE [KEY=VALUE ...]``: argparse cannot take positionals after an option, so overrides there are collected here."""

    def __call__(self, parser, namespace, values, option_string=None):  # noqa: ANN001
        source, rest = values[0], list(values[1:])
        bad = [v for v in rest if "=" not in v]
        if bad or "=" in source:
            parser.error(f"--checkpoints takes one directory or run id, then optional KEY=VALUE overrides; got {values}")
        namespace.checkpoints = source
        namespace.trailing_overrides = rest


def _at_least_one(what: str, example: str, one: str = "", at_most: Optional[int] = None, most: str = ""):
    """An argparse type: a whole number >= 1 (and <= ``at_most``) of ``what`` (e.g. ``children to measure at once``);
    the messages give ``example`` (an option as typed), what 1 means (``one``) and why the bound (``most``)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number; give the number of {what}, e.g. {example}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{value}: give 1 or more {what}{f' ({one})' if one else ''}")
        if at_most is not None and value > at_most:
            raise argparse.ArgumentTypeError(f"{value}: give at most {at_most} {what}{f' ({most})' if most else ''}")
        return value

    return parse


_jobs = _at_least_one("children to measure at once", "--jobs 2", "1 measures them one after another")
# attnsim.analysis.listing.MAX_RUNS, written out: importing that module here would import it before `runs`'s lean start
_limit = _at_least_one("runs", "--limit 20", at_most=50_000, most="MLflow's most per search")


def _add_analysis_parsers(sub: Any) -> None:
    """``finetune``, ``sweep``, ``compare`` and ``report``."""
    p = sub.add_parser("finetune", help="fine-tune a classifier (Lightning fit) and save checkpoints for sweeps")
    p.add_argument("experiment", nargs="?", default=DEFAULT_FINETUNE, help=f"experiment name or YAML path (default {DEFAULT_FINETUNE})")
    p.add_argument("overrides", nargs="*", default=[], help="KEY=VALUE dot-list overrides, e.g. trainer.max_steps=100 checkpoint.every_n_steps=25")
    _add_uri(p)
    p.set_defaults(func=_cmd_finetune)

    p = sub.add_parser(
        "sweep",
        help="run an experiment on every fine-tuning checkpoint (and the base model) as nested runs",
        epilog=f"exit status: 0 every checkpoint measured (or measured before); {EXIT_UNREADABLE} the sweep finished but some checkpoints "
        "could not be read (skipped: status 'unreadable: REASON', tag attnsim.sweep_unreadable_count); 2 bad input, or no checkpoint "
        "could be read; 130 or 143 interrupted.",
    )
    p.add_argument("experiment", help="experiment name or YAML path, e.g. csm")
    p.add_argument(
        "--checkpoints",
        required=True,
        nargs="+",
        action=_CheckpointsAndOverrides,
        metavar=("DIR_OR_RUN_ID", "KEY=VALUE"),
        help="checkpoint directory (step-NNNNNN sub-directories) or the run id of `attnsim finetune`; overrides may follow",
    )
    p.add_argument("--base", default=None, help="model measured as step 0 (default: the base model recorded in the checkpoints)")
    p.add_argument(
        "--jobs",
        type=_jobs,
        default=1,
        metavar="N",
        help="measure up to N children at once, each in its own process (one GPU each, round robin, when there are GPUs); default 1",
    )
    p.add_argument("overrides", nargs="*", default=[], help="KEY=VALUE dot-list overrides for every child, e.g. corpus.limit=64")
    _add_uri(p)
    p.set_defaults(func=_cmd_sweep)

    p = sub.add_parser("compare", help="per-layer statistics of several runs side by side (table, CSV, figures)")
    p.add_argument("run_ids", nargs="*", metavar="RUN_ID", help="runs to compare, in column order")
    p.add_argument("--experiment", default=None, metavar="NAME", help="every finished measurement run of this MLflow experiment")
    p.add_argument("--parent", default=None, metavar="RUN_ID", help="the finished children of this sweep run, by global step")
    p.add_argument("--force", action="store_true", help="compare even when seq_len or statistic definitions differ, or runs are unfinished")
    p.add_argument("--csv", default="comparison.csv", metavar="PATH", help="where to write the table as CSV (default comparison.csv)")
    p.add_argument("--no-log", action="store_true", help="do not log a comparison run")
    p.add_argument("--log-experiment", default="compare", metavar="NAME", help="MLflow experiment of the comparison run (default compare)")
    p.add_argument("--uri", default=None, help="tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///<this folder>/mlruns/mlflow.db)")
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser("runs", help="list the tracking store's runs, newest first, or print one run's tags, params and statistics")
    p.add_argument("run_id", nargs="*", default=[], metavar="RUN_ID", help="print this run: its attnsim tags, params and statistics' model means")
    p.add_argument("--experiment", default=None, metavar="NAME", help="only the runs of this MLflow experiment (e.g. csm)")
    p.add_argument("--limit", type=_limit, default=20, metavar="N", help="at most N runs (default 20)")
    p.add_argument("--uri", default=None, help="tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///<this folder>/mlruns/mlflow.db)")
    p.set_defaults(func=_cmd_runs)

    p = sub.add_parser("report", help="write a report (Markdown and HTML) of the paper's claims against one or more runs and print its verdicts")
    p.add_argument("run_ids", nargs="+", metavar="RUN_ID", help="runs to compare, e.g. a trained model and its random control")
    p.add_argument("--out", default=None, help="Markdown file to write, the HTML version beside it (default: reports/report-<ids>.md)")
    p.add_argument("--uri", default=None, help="tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///<this folder>/mlruns/mlflow.db)")
    p.add_argument("--no-log", action="store_true", help="do not log the report as an artifact of the runs")
    p.set_defaults(func=_cmd_report)


def command_of(argv: List[str]) -> Optional[str]:
    """The subcommand named in ``argv`` (its first word that is not an option), None when there is none."""
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word
    return None


def build_parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """The ``attnsim`` argument parser.

    Args:
        command: the subcommand about to be parsed (:func:`command_of`); kept for callers, every
            parser is built either way (they import nothing but argparse).
    """
    parser = argparse.ArgumentParser(prog="attnsim", description="Measure what attention heads do; every run is tracked in MLflow.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list experiments with a one-line description")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("show", help="print an experiment's resolved config")
    p.add_argument("experiment")
    p.add_argument("overrides", nargs="*", default=[], help="KEY=VALUE dot-list overrides, GROUP=OPTION group swaps")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("run", help="run an experiment and log it to MLflow")
    p.add_argument("experiment")
    p.add_argument("overrides", nargs="*", default=[], help="KEY=VALUE dot-list overrides, e.g. corpus.limit=64 model.path=/a/dir")
    _add_uri(p)
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("ui", help="serve a local tracking store with the MLflow UI on 127.0.0.1 (no job workers; Ctrl-C stops it)")
    p.add_argument("--uri", default=None, help="tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///<this folder>/mlruns/mlflow.db)")
    p.add_argument("--port", type=int, default=5000, help="port on 127.0.0.1 (default 5000)")
    p.set_defaults(func=_cmd_ui)

    p = sub.add_parser("server", help="serve a shared MLflow tracking server: PostgreSQL backend store, proxied artifacts (Ctrl-C stops it)")
    p.add_argument(
        "--backend-store-uri", default=None, metavar="URI", help="PostgreSQL database, postgresql://USER@HOST:PORT/DB (default $ATTNSIM_BACKEND_STORE_URI)"
    )
    p.add_argument("--artifacts-destination", default=None, metavar="DIR", help="folder where the server keeps artifacts (default ./mlartifacts)")
    p.add_argument("--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1; give 0.0.0.0 to share it on the network)")
    p.add_argument("--port", type=int, default=5000, help="port (default 5000)")
    p.set_defaults(func=_cmd_server)

    p = sub.add_parser("explore", help="type a text, see every head's attention and CSM now, switch heads off: a local web page (Ctrl-C stops it)")
    p.add_argument("overrides", nargs="*", default=[], help="KEY=VALUE overrides, e.g. model.path=smollm2 corpus.seq_len=128 (the most tokens of one text)")
    p.add_argument("--run", default=None, metavar="RUN_ID", help="a logged run of the same model: its per-head corpus statistics beside the live maps")
    p.add_argument("--uri", default=None, help="tracking store of --run (default: $MLFLOW_TRACKING_URI, else sqlite:///<this folder>/mlruns/mlflow.db)")
    p.add_argument("--port", type=int, default=8765, help="port (default 8765)")
    p.add_argument(
        "--host", default="127.0.0.1", help="interface to listen on (default 127.0.0.1: this machine only; another exposes the model to the network)"
    )
    p.add_argument("--text", default="", help="the text the page opens with")
    p.set_defaults(func=_cmd_explore)

    p = sub.add_parser("cache", help="list or clear the models attnsim converted (GGUF files dequantised to float32 folders)")
    p.add_argument("action", nargs="?", choices=("list", "clear"), default="list", help="list (default) or clear the converted models")
    p.set_defaults(func=_cmd_cache)

    _add_analysis_parsers(sub)
    return parser


def parse_arguments(parser: argparse.ArgumentParser, argv: List[str]) -> argparse.Namespace:
    """``parser.parse_args(argv)``, except that ``KEY=VALUE`` overrides may also follow the options
    (``attnsim run csm --uri URI corpus.limit=4``): argparse fills a ``nargs="*"`` positional once, so the
    overrides after an option come back unrecognised and are appended here, in their order. Anything
    else unrecognised is argparse's usual error (exit status 2)."""
    args, extra = parser.parse_known_args(argv)
    overrides = [word for word in extra if "=" in word and not word.startswith("-")]
    if extra and (len(overrides) < len(extra) or not hasattr(args, "overrides")):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if overrides:
        args.overrides = list(args.overrides or []) + overrides
    return args


def interrupted_message(command: str, killed: List[str]) -> str:
    """What Ctrl-C (or SIGTERM) prints: which runs ended KILLED, or that none had been created.

    The text starts with a newline, so that it begins on its own line even when it interrupts a progress bar's
    line (the bar, on stdout, leaves its line open; a terminal shows both streams on it).

    Args:
        command: the subcommand interrupted (``run``, ``sweep``, ``finetune`` name their runs).
        killed: the ids of the runs ended KILLED (``attnsim.tracking.store.KILLED_RUNS``).
    """
    if command in ("run", "sweep", "finetune") and killed:
        which = f"the run {killed[0]} was" if len(killed) == 1 else f"the runs {', '.join(killed)} were"
        text = f"interrupted: {which} ended as KILLED with what it had measured logged (tag attnsim.partial)"
    elif command in ("run", "sweep", "finetune"):
        text = "interrupted before any run was created: nothing was logged"
    else:
        text = "interrupted"
    return "\n" + text


def say_interrupted(command: str, killed: List[str]) -> None:
    """Print :func:`interrupted_message` to stderr, after what stdout holds (a progress bar's open line) is written."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):  # stdout closed or its reader gone: the message still goes to stderr
        pass
    print(interrupted_message(command, killed), file=sys.stderr, flush=True)


def main(argv: Optional[List[str]] = None) -> int:
    started = time.perf_counter()  # the start of `attnsim run`'s zz_run/time_total
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(command_of(argv))
    args = parse_arguments(parser, argv)
    args.started = started
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.command in READING_MODULES:
        _start_reading(args)
    if args.command not in ("list", "show", "run", "ui", "server", "cache", "explore", "sweep", "finetune"):  # these quiet them after their config checks
        quiet_libraries(args.verbose, heavy=args.command not in ("report", "compare", "runs"))
    from attnsim.tracking.store import command_line

    try:
        with command_line(["attnsim", *argv]):  # in each run's description
            return args.func(args)
    except AttnsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader of stdout closed early (`attnsim list | head -n 1`): stop writing, as Unix tools do, without a traceback
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        store = sys.modules.get("attnsim.tracking.store")
        say_interrupted(args.command, list(getattr(store, "KILLED_RUNS", [])))
        signals = list(getattr(store, "RECEIVED_SIGNALS", []))
        return 128 + signals[-1] if signals else 130  # SIGTERM: 143, as a shell reports it; Ctrl-C: 130


if __name__ == "__main__":
    sys.exit(main())
