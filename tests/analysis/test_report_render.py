"""The report renders: Markdown without HTML (MLflow's viewer shows raw HTML as text), an HTML version logged
beside it, the verdicts printed to the terminal, and trained verdicts that the random control also earns flagged.

Runs are hand-made (tests.helpers.runs.fake_report_run) or written straight into a temporary store: no model runs.
"""

from __future__ import annotations

import re

import pytest
from mlflow import MlflowClient

from attnsim.analysis.claims import CLAIMS
from attnsim.analysis.report import glance_text, render, render_html
from attnsim.analysis.runs import LoggedRun
from attnsim.analysis.verdicts import NOT_SEPARATED, Assessment, separates
from attnsim.cli import main
from tests.helpers.runs import fake_report_run

HTML_TAG = re.compile(r"<\s*/?\s*[A-Za-z!?]")


def test_markdown_has_no_html_and_one_value_per_line():
    text = render([fake_report_run(), fake_report_run(control=True)])
    assert not HTML_TAG.search(text) and "<" not in text
    claim3 = text.split("## 3. ")[1].split("## 4. ")[0]
    # one list item per run, one nested item per statistic
    assert [line for line in claim3.splitlines() if line.startswith("  - ")] == [
        "  - same-sentence share: L0 0.3, L1 0.4, L2 0.1 (chance 0.2)",
        "  - boundary contrast: L0 1, L1 1.1, L2 1.2",
        "  - within-sentence spread: L0 0.9, L1 0.7, L2 0.8",
    ] * 2


def test_text_from_runs_cannot_inject_html_or_break_tables():
    run = fake_report_run()
    run.name = "<b>bold</b> | x"
    run.tags["attnsim.model"] = "<img src=x onerror=alert(1)>"
    text = render([run])
    assert not HTML_TAG.search(text)
    assert "&lt;b&gt;bold&lt;/b&gt; \\| x" not in text and "&lt;b>bold&lt;/b> \\| x" in text
    page = render_html(text)
    assert "<b>" not in page and "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_html_version_has_the_tables_and_sections():
    page = render_html(render([fake_report_run(), fake_report_run(control=True)]))
    assert page.startswith("<!DOCTYPE html>") and page.count("<table>") == 2  # verdicts, runs
    assert page.count("<h2>") == 2 + len(CLAIMS) + 1  # verdicts, runs, one per claim, rules
    glance = page.split("<h2>Verdicts at a glance</h2>")[1].split("</table>")[0]
    assert glance.count("<tr>") == 1 + len(CLAIMS)
    assert "<td>4. Final-layer attention goes to separators ([CLS], [SEP], '.', ',')</td>\n<td>does not hold</td>\n<td>does not hold</td>" in glance
    assert "&lt;br&gt;" not in page and "<br>" not in page


@pytest.mark.parametrize(
    "trained, controls, separated",
    [
        ("holds", ["holds"], False),
        ("holds", ["mixed"], True),
        ("mixed", ["mixed"], False),
        ("mixed", ["holds"], False),
        ("mixed", ["does not hold"], True),
        ("holds", ["does not hold", "holds"], False),
        ("does not hold", ["does not hold"], True),
        ("not measured", ["holds"], True),
        ("holds", [], True),
    ],
)
def test_which_verdicts_separate_trained_from_random(trained, controls, separated):
    assert separates(trained, controls) is separated


def control_that_differs() -> LoggedRun:
    """fake_report_run's values as a control, except claim 2 (short range at chance: does not hold) and 6 (no head finds long-range repeats: mixed)."""
    control = fake_report_run(control=True)
    for layer in range(3):
        control.metrics[f"distance/short_range_share/L{layer:02d}"] = 0.05
    control._tables["repetition"] = control._tables["repetition"].assign(long_identical_high_share=0.0)
    return control


def test_flags_mark_trained_verdicts_the_control_also_earns():
    trained = fake_report_run()
    assessment = Assessment.of([trained, control_that_differs()])
    verdicts = [[o.verdict for o in row] for row in assessment.outcomes]
    assert verdicts == [
        ["holds", "holds"],
        ["holds", "does not hold"],
        ["mixed", "mixed"],
        ["does not hold", "does not hold"],
        ["holds", "holds"],
        ["holds", "mixed"],
        ["mixed", "mixed"],
    ]
    assert assessment.flagged == [[True, False], [False, False], [True, False], [False, False], [True, False], [False, False], [True, False]]
    text = render([trained, control_that_differs()])
    glance = [line for line in text.splitlines() if re.match(r"\| \d\. ", line)]
    assert glance[0].endswith(f"| holds ({NOT_SEPARATED}) | holds |") and glance[1].endswith("| holds | does not hold |")
    assert text.split("## 2. ")[1].split("\n- ")[1].startswith("paper `eeeeeeee` (pretrained): **holds** (a: yes, b: yes)\n")
    assert text.split("## 3. ")[1].split("\n- ")[1].startswith(f"paper `eeeeeeee` (pretrained): **mixed** (a: no, b: yes, c: yes) - *{NOT_SEPARATED}*\n")
    # without a control nothing is flagged
    assert NOT_SEPARATED not in render([fake_report_run()]) and not Assessment.of([fake_report_run(), fake_report_run()]).any_flagged


def test_glance_text_for_the_terminal():
    lines = glance_text([fake_report_run(), control_that_differs()]).splitlines()
    assert lines[0].split() == ["claim", "paper", "eeeeeeee", "paper", "ffffffff", "(control)"]
    assert set(lines[1]) == {"-", " "}
    rows = [re.split(r"\s{2,}", line) for line in lines[2 : 2 + len(CLAIMS)]]
    assert rows == [
        ["1. Early layers pair tokens at long range", "holds *", "holds"],
        ["2. Middle layers concentrate near the diagonal (short range)", "holds", "does not hold"],
        ["3. Final layers spread over one sentence, with a drop across sentence boundaries", "mixed *", "mixed"],
        ["4. Final-layer attention goes to separators ([CLS], [SEP], '.', ',')", "does not hold", "does not hold"],
        ["5. Each head has a distinct anchor (most common) token", "holds *", "holds"],
        ["6. Repetition heads: some heads join identical tokens across the whole input", "holds", "mixed"],
        ["7. High-CSM pairs prefer the same sentence (paper: preference above 33%)", "mixed *", "mixed"],
    ]
    assert lines[-3] == f"* {NOT_SEPARATED}: the random-weights control of the same architecture in this report earns the same verdict"
    assert lines[-1] == "paper eeeeeeee: judged by control paper ffffffff"


def test_each_trained_run_is_judged_by_the_control_of_its_own_architecture():
    """A MiniLM run and a SmolLM2 run beside SmolLM2's random control: only SmolLM2's run is judged by it."""
    minilm = fake_report_run()
    minilm.tags.update({"attnsim.model_type": "bert", "attnsim.shape": "6x12x32"})
    smollm2 = fake_report_run()
    smollm2.run_id = "dddddddd" + smollm2.run_id[8:]
    smollm2.tags.update({"attnsim.model_type": "llama", "attnsim.shape": "6x12x32"})
    control = control_that_differs()
    control.tags.update({"attnsim.model_type": "llama", "attnsim.shape": "6x12x32"})
    assessment = Assessment.of([minilm, smollm2, control])
    assert assessment.controls == {0: [], 1: [2]}
    assert not any(row[0] for row in assessment.flagged) and any(row[1] for row in assessment.flagged)
    text = glance_text([minilm, smollm2, control])
    assert "paper eeeeeeee: no matching control (same model type, shape, window length and windows)" in text
    assert "paper dddddddd: judged by control paper ffffffff" in text
    assert "no matching control" in render([minilm, smollm2, control])


def _logged_run(client: MlflowClient, experiment_id: str, run: LoggedRun, params: dict) -> str:
    """``run``'s metrics, tags and tables written into a store as a finished run."""
    created = client.create_run(experiment_id, run_name=run.name, tags={k: v for k, v in run.tags.items() if k != "attnsim.control"})
    run_id = created.info.run_id
    for key, value in run.metrics.items():
        client.log_metric(run_id, key, value)
    for key, value in params.items():
        client.log_param(run_id, key, value)
    for finding, table in run._tables.items():
        client.log_text(run_id, table.to_csv(index=False), f"tables/{finding}_heads.csv")
    client.set_terminated(run_id)
    return run_id


def test_attnsim_report_logs_markdown_and_html_and_prints_the_verdicts(tmp_path, monkeypatch, capsys):
    uri = f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    client = MlflowClient(uri)
    experiment = client.create_experiment("paper", artifact_location=(tmp_path / "artifacts").as_uri())
    trained = _logged_run(client, experiment, fake_report_run(), {"model.init": "pretrained"})
    control = _logged_run(client, experiment, control_that_differs(), {"model.init": "random"})  # a control by its param alone
    out = tmp_path / "out" / "report.md"
    assert main(["report", trained, control, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    for run_id in (trained, control):
        assert sorted(a.path for a in client.list_artifacts(run_id, "reports")) == ["reports/report.html", "reports/report.md"]
    markdown, page = out.read_text(), out.with_suffix(".html").read_text()
    assert not HTML_TAG.search(markdown) and page.count("<table>") == 2
    # the same table as from the runs in memory: claim 1 holds for both (flagged), claim 2 for the trained model only, ...
    assert glance_text([fake_report_run(), control_that_differs()]).replace("eeeeeeee", trained[:8]).replace("ffffffff", control[:8]) in printed
    assert re.search(r"^1\. Early layers pair tokens at long range\s+holds \*\s+holds$", printed, re.M)
    assert f"* {NOT_SEPARATED}" in printed and f"paper {control[:8]} (control)" in printed
    assert f"#/experiments/{experiment}/runs/{trained}/artifacts/reports/report.md?workflowType=machine_learning" in printed


def test_report_refuses_an_html_out_path_before_reading_runs(tmp_path, capsys):
    assert main(["report", "0" * 32, "--out", str(tmp_path / "report.html"), "--uri", f"sqlite:///{tmp_path / 'none' / 'mlflow.db'}"]) == 2
    err = capsys.readouterr().err
    assert "ends in .html" in err and "report.md" in err
    assert not (tmp_path / "none").exists()  # the store was not even opened
