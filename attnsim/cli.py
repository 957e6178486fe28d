"""Command line: ``attnsim run|list|show|ui`` and the subcommands in :data:`SUBCOMMANDS`.

Bad input (an :class:`~attnsim.errors.AttnsimError`) prints one paragraph,
``error: ...``, with no traceback, and exits with status 2.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import List, Optional

from attnsim.errors import AttnsimError

# Further subcommands: "module:function" where function(subparsers) adds a parser
# whose ``func(args) -> int`` runs it. One line per module keeps this file small.
SUBCOMMANDS: List[str] = [
    "attnsim.training.finetune:add_parser",
    "attnsim.tracking.sweep:add_parser",
    "attnsim.tracking.compare:add_parser",
    "attnsim.report:add_parser",
]


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


def _cmd_run(args: argparse.Namespace) -> int:
    from attnsim.config import load_config
    from attnsim.findings.registry import FINDINGS

    cfg = load_config(args.experiment, args.overrides, known_findings=FINDINGS)  # config errors come before the heavy imports
    _quiet_libraries(args.verbose)
    from attnsim.runner import execute, prepare
    from attnsim.tracking.links import open_hint

    result = execute(prepare(cfg))
    print(f"\nrun id: {result.run_id}  (experiment id {result.experiment_id}, {result.windows} windows)")
    print(f"tracking store: {result.tracking_uri}")
    print(open_hint(result.tracking_uri, result.experiment_id, result.run_id))
    return 0


def _cmd_ui(args: argparse.Namespace) -> int:
    from attnsim.tracking.store import resolve_uri
    from attnsim.tracking.ui import serve

    return serve(resolve_uri(args.uri), args.port, verbose=args.verbose)


# Commands whose parsers are declared here; the parsers of SUBCOMMANDS are only built
# when the command line may need them, so that `list` and `show` import no heavy module.
BUILTIN = ("list", "show", "run", "ui")


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
        command: the subcommand about to be parsed (:func:`command_of`). For one of
            :data:`BUILTIN` the modules of :data:`SUBCOMMANDS` are not imported (they may
            import pandas); for anything else (None: ``--help``, a subcommand, a typo) every
            subcommand's parser is built.
    """
    parser = argparse.ArgumentParser(prog="attnsim", description="Measure what attention heads do; every run is tracked in MLflow.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug messages")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="list experiments with a one-line description")
    p.set_defaults(func=_cmd_list)

    p = sub.add_parser("show", help="print an experiment's resolved config")
    p.add_argument("experiment")
    p.add_argument("overrides", nargs="*", help="KEY=VALUE dot-list overrides, GROUP=OPTION group swaps")
    p.set_defaults(func=_cmd_show)

    p = sub.add_parser("run", help="run an experiment and log it to MLflow")
    p.add_argument("experiment")
    p.add_argument("overrides", nargs="*", help="KEY=VALUE dot-list overrides, e.g. corpus.limit=64 model.path=/a/dir")
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("ui", help="serve a local tracking store with the MLflow UI on 127.0.0.1 (no job workers; Ctrl-C stops it)")
    p.add_argument("--uri", default=None, help="tracking URI (default: $MLFLOW_TRACKING_URI or ./mlruns/mlflow.db)")
    p.add_argument("--port", type=int, default=5000, help="port on 127.0.0.1 (default 5000)")
    p.set_defaults(func=_cmd_ui)

    if command in BUILTIN:
        return parser
    import importlib

    for entry in SUBCOMMANDS:
        module, function = entry.split(":")
        getattr(importlib.import_module(module), function)(sub)
    return parser


def _quiet_libraries(verbose: bool = False) -> None:
    """Keep the terminal for attnsim's own output, warnings and Lightning's progress bar.

    Lightning's start-up INFO lines and tips, MLflow's database-migration INFO
    lines and transformers' weight-loading reports and bars are hidden
    (``attnsim -v`` shows them).
    """
    if verbose:
        return
    import warnings

    import pytorch_lightning  # noqa: F401 - it sets its loggers' levels when imported; override after

    for name in ("pytorch_lightning", "pytorch_lightning.utilities.rank_zero", "lightning_fabric", "mlflow", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # a deprecation inside Lightning's own pytree helper, not actionable by users
    warnings.filterwarnings("ignore", message=r".*isinstance\(treespec, LeafSpec\).*")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:  # transformers is a dependency; nothing to quiet without it
        pass


def main(argv: Optional[List[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(command_of(argv))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.command not in ("list", "show", "run", "ui"):  # `run` quiets them after its config checks
        _quiet_libraries(args.verbose)
    from attnsim.tracking.store import command_line

    try:
        with command_line(["attnsim", *argv]):  # in each run's description
            return args.func(args)
    except AttnsimError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if args.command in ("run", "sweep", "finetune"):
            print("interrupted: the run was ended as KILLED with what it had measured logged (tag attnsim.partial)", file=sys.stderr)
        else:
            print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
