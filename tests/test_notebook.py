"""The Python API in a Jupyter notebook (run on a real kernel with nbclient) is as quiet as the command line:
attnsim's results and one progress bar per run, none of the libraries' chatter (attnsim.quiet)."""

from __future__ import annotations

import os

import nbclient
import nbformat

CHATTER = (
    "GPU available",
    "TPU available",
    "litlogger",
    "Loading weights",
    "LeafSpec",
    "IProgress",
    "Downloading artifacts",
    "LOAD REPORT",
    "Creating initial MLflow database",
)


def notebook_outputs(cells, cwd) -> list:
    """Run ``cells`` (source strings) on a fresh python3 kernel in ``cwd``; every output of every cell as text."""
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    client = nbclient.NotebookClient(book, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(cwd)}})
    client.execute()
    out = []
    for cell in book.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                out.append(output["text"])
            elif "data" in output:
                out.append(output["data"].get("text/plain", ""))
                out.append(output["data"].get("text/html", ""))
    return out


def test_api_in_a_notebook_shows_results_and_one_bar_per_run(tmp_path, monkeypatch):
    monkeypatch.delenv("ATTNSIM_VERBOSE", raising=False)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    cells = [
        f"import os\nos.environ['MLFLOW_TRACKING_URI'] = {uri!r}\nos.environ['HF_HUB_OFFLINE'] = '1'\nimport attnsim",
        "result = attnsim.run('csm', ['corpus.limit=2', 'corpus.seq_len=32', 'tracking.figures=false', 'plots.examples=0'])\nresult.status",
        "report = attnsim.report([result.run_id], out='report.md')\nreport.verdicts.shape",
        "attnsim.view('The cat sat on the mat. The cat sat on the mat.', model='bundled', layer=1, head=2)",
    ]
    env_before = dict(os.environ)
    outputs = notebook_outputs(cells, tmp_path)
    assert dict(os.environ) == env_before
    text = "\n".join(outputs)
    assert "'FINISHED'" in text and "(7, 1)" in text, text
    assert "<script" in outputs[-1] and "explore" in outputs[-1]  # the inline explorer: self-contained HTML, no server
    for chatter in CHATTER:
        assert chatter not in text, f"{chatter!r} printed in the notebook:\n{text}"
    bars = {line.split(":", 1)[0].strip() for line in text.replace("\r", "\n").splitlines() if "windows |" in line}
    assert bars == {"csm · all-MiniLM-L6-v2"}, text  # one progress bar, the run's (its name: experiment · model)
