"""Ctrl-C: the message `attnsim` prints starts on its own line, not on the progress bar's open line."""

from __future__ import annotations

import sys

import pytest

import attnsim.cli as cli
from attnsim.tracking import store

RUN = "5f0c6e1d2a3b4c5d6e7f8a9b0c1d2e3f"


def test_the_message_names_the_killed_runs_and_starts_with_a_newline():
    assert cli.interrupted_message("run", [RUN]) == f"\ninterrupted: the run {RUN} was ended as KILLED with what it had measured logged (tag attnsim.partial)"
    assert cli.interrupted_message("sweep", ["a" * 32, "b" * 32]).startswith(f"\ninterrupted: the runs {'a' * 32}, {'b' * 32} were ended as KILLED")
    assert cli.interrupted_message("finetune", []) == "\ninterrupted before any run was created: nothing was logged"
    assert cli.interrupted_message("compare", [RUN]) == "\ninterrupted"


@pytest.mark.parametrize(
    "command, killed, printed",
    [
        (["run", "csm"], [RUN], f"\ninterrupted: the run {RUN} was ended as KILLED with what it had measured logged (tag attnsim.partial)\n"),
        (["run", "csm"], [], "\ninterrupted before any run was created: nothing was logged\n"),
        (["cache"], [], "\ninterrupted\n"),
    ],
)
def test_ctrl_c_under_a_progress_bar_prints_the_message_on_a_line_of_its_own(command, killed, printed, monkeypatch, capsys):
    def bar_then_ctrl_c(args):
        sys.stdout.write("\rcsm: 24/512 windows |#         | 5% [00:12<04:05, 1.99window/s]")  # a bar's line, left open
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, f"_cmd_{command[0]}", bar_then_ctrl_c)
    monkeypatch.setattr(store, "KILLED_RUNS", list(killed))
    monkeypatch.setattr(store, "RECEIVED_SIGNALS", [])
    assert cli.main(command) == 130
    captured = capsys.readouterr()
    assert captured.out.endswith("1.99window/s]") and captured.err == printed
    # as a terminal shows both streams: the bar's line, then the message on the next
    assert (captured.out + captured.err).splitlines()[-1] == printed.strip()
