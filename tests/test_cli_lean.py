"""`attnsim list` and `attnsim show` print YAML without importing torch, Lightning, transformers, MLflow,
matplotlib or pandas (each is checked in a fresh interpreter: which modules were imported, not how long it took)."""

from __future__ import annotations

import json

import pytest

from tests.helpers.runs import fresh, heavy_after

HEAVY = ("torch", "matplotlib", "transformers", "mlflow", "pytorch_lightning", "pandas")


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["show", "csm"], ["name: csm"]),
        (["show", "paper", "corpus.limit=4"], ["name: paper", "  limit: 4"]),
        (["-v", "show", "vit_csm"], ["name: vit_csm"]),
        (["list"], ["csm ", "paper "]),
    ],
)
def test_list_and_show_import_no_heavy_library(argv, expected):
    out, heavy, _ = heavy_after(f"from attnsim.cli import main\nassert main({argv!r}) == 0")
    assert heavy == []
    for text in expected:
        assert any(line.startswith(text) for line in out), (text, out[:5])


def test_show_still_refuses_an_unknown_finding_without_heavy_imports():
    out, heavy, err = heavy_after("from attnsim.cli import main\nassert main(['show', 'csm', 'findings=[csmm]']) == 2")
    assert heavy == []
    assert "Unknown finding 'csmm' at config key 'findings[0]'. Did you mean 'csm'?" in err


def test_finding_names_are_known_without_importing_any_finding():
    _, heavy, _ = heavy_after(
        "from attnsim.findings.registry import FINDINGS, NAMES\n"
        "assert 'csm' in FINDINGS and 'alignment' in FINDINGS and 'induction' in NAMES and 'ablation' in NAMES and 'nope' not in FINDINGS and len(FINDINGS) == len(NAMES) >= 15\n"
        "assert sorted(FINDINGS)[:3] == ['ablation', 'alignment', 'anchors']"
    )
    assert heavy == []


def test_every_registered_finding_resolves_to_its_class():
    from attnsim.findings.base import Finding
    from attnsim.findings.registry import FINDINGS, NAMES

    assert list(FINDINGS) == list(NAMES)
    for name in NAMES:
        kind = FINDINGS[name]
        assert issubclass(kind, Finding) and kind.name == name
    assert FINDINGS["csm"] is FINDINGS["csm"]  # imported once, then cached


def test_the_parser_of_a_builtin_command_skips_the_subcommand_modules_and_help_lists_them_all():
    from attnsim.cli import build_parser, command_of

    assert command_of(["-v", "show", "csm"]) == "show" and command_of(["--help"]) is None and command_of([]) is None
    lean = build_parser("show")
    assert lean.parse_args(["show", "csm", "corpus.limit=2"]).overrides == ["corpus.limit=2"]
    full = build_parser(None)
    choices = full._subparsers._group_actions[0].choices  # argparse keeps the subcommand parsers here
    assert {"list", "show", "run", "ui", "finetune", "sweep", "compare", "report", "runs"} <= set(choices)
    assert full.parse_args(["report", "abc"]).run_ids == ["abc"]


def test_report_compare_and_runs_import_no_torch_lightning_or_transformers(tmp_path):
    """Commands that read runs start fast: no torch, Lightning or transformers (4-5 s of imports before), and the
    libraries they do import are not walked by the garbage collector again (cli._start_reading)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    setup = (
        f"import os\nif os.path.exists({str(tmp_path / 'mlflow.db')!r}): os.remove({str(tmp_path / 'mlflow.db')!r})\n"
        "from mlflow import MlflowClient\n"
        f"c = MlflowClient({uri!r}); e = c.create_experiment('csm')\n"
        "ids = []\n"
        "for name in ('a', 'b'):\n"
        "    r = c.create_run(e, run_name=name, tags={'attnsim.kind': 'measure', 'attnsim.experiment': 'csm', 'attnsim.seq_len': '128', 'attnsim.stats_definition': '1'})\n"
        "    c.log_param(r.info.run_id, 'findings', 'csm'); c.log_param(r.info.run_id, 'stats.top_fraction', '0.02')\n"
        "    [c.log_metric(r.info.run_id, f'csm/mean/L0{l}', 0.5 + l) for l in range(3)]\n"
        "    c.set_terminated(r.info.run_id); ids.append(r.info.run_id)\n"
        "from attnsim.cli import main\n"
    )
    heavy = ("torch", "pytorch_lightning", "lightning", "lightning_fabric", "transformers")
    for command in (  # as typed: each logs its result (a report artifact; a comparison run with its figures)
        f"['report', *ids, '--uri', {uri!r}, '--out', {str(tmp_path / 'r.md')!r}]",
        f"['compare', *ids, '--uri', {uri!r}, '--force', '--csv', {str(tmp_path / 'c.csv')!r}]",
        f"['runs', '--uri', {uri!r}]",
        f"['runs', ids[0], '--uri', {uri!r}]",
    ):
        code = (
            setup + f"assert main({command}) == 0\nimport gc, sys, json\nfrom attnsim.workflows import startup\n"
            f"print(json.dumps([[m for m in {heavy!r} if m in sys.modules], gc.get_freeze_count(), gc.isenabled(), startup._exit_hook]))"
        )
        proc = fresh(code)
        assert proc.returncode == 0, proc.stderr[-3000:]
        imported, frozen, enabled, exit_hook = json.loads(proc.stdout.splitlines()[-1])
        assert imported == [], command
        # a lean start, as `run`'s: MLflow and its SQL store imported with the collector paused, then frozen, and frozen again at exit
        assert frozen > 100_000 and enabled and exit_hook, (command, frozen)
        if command.startswith("['compare'"):
            assert "comparison run: " in proc.stdout  # the comparison was logged, figures drawn
        if command.startswith("['runs', ids[0]"):
            assert "  attnsim.seq_len " in proc.stdout and "and 3 layer-mean and per-head keys" in proc.stdout  # its tags; csm/mean/L00-L02
