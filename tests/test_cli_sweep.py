"""`attnsim sweep`'s printed summary (attnsim.printed.format_sweep): every line fits 100 columns, the key values are in it."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from attnsim.printed import SWEEP_WIDTH, _shortened, format_sweep

PARENT = "0f3c5e9a1b2d4c6e8f0a1b2c3d4e5f60"
CHILDREN = ["a1" * 16, "b2" * 16, "c3" * 16, ""]
CKPT = "/home/someone/projects/attention-study/checkpoints/finetune_bbc/7d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a"
REASON = (
    "unreadable: model.safetensors is damaged (SafetensorError: Error while deserializing header: HeaderTooLarge); "
    "re-save the checkpoint or remove it, then run the sweep again"
)
STATISTICS = [
    "csm/mean",
    "csm/std",
    "distance/short_range_share",
    "distance/short_range_share_chance",
    "distance/long_range_share",
    "distance/long_range_share_chance",
    "distance/high_mean_distance",
    "sentences/same_sentence_ratio",
]


def sweep_result() -> SimpleNamespace:
    runs = pd.DataFrame(
        {
            "step": [0, 50, 100, 150],
            "checkpoint": [
                "/home/someone/.cache/attnsim/models/sentence-transformers__all-MiniLM-L6-v2-with-a-long-local-name",
                f"{CKPT}/step-000050",
                f"{CKPT}/step-000100",
                f"{CKPT}/step-000150",
            ],
            "run_id": CHILDREN,
            "status": ["skipped", "measured", "measured", REASON],
        }
    )
    metrics = pd.DataFrame(
        [[1.0123 + i, 0.966, 0.182, 0.0651, 0.161, 0.242, 32.04, 0.4415] for i in range(3)], columns=STATISTICS, index=pd.Index([0, 50, 100], name="step")
    )
    return SimpleNamespace(parent_run_id=PARENT, experiment_id="12", tracking_uri="sqlite:////tmp/mlruns/mlflow.db", runs=runs, metrics=metrics)


def test_every_line_of_the_sweep_summary_fits_100_columns_with_its_key_values():
    text = format_sweep(sweep_result(), jobs=2)
    lines = text.splitlines()
    assert SWEEP_WIDTH == 100
    assert max(len(line) for line in lines) <= 100, "\n".join(line for line in lines if len(line) > 100)
    # the tutorials read the parent's id as the 4th word of this line (awk '/^sweep parent run:/ {print $4}')
    assert lines[0] == f"sweep parent run: {PARENT}  (experiment id 12)"
    joined = " ".join(text.split())
    assert "4 children: 2 measured now, up to 2 at once, 1 already finished, 1 unreadable (skipped; see the status column)" in joined
    assert f"per layer side by side: attnsim compare --parent {PARENT}" in lines
    assert "full paths and reasons: the parent's artifact sweep/runs.csv" in joined
    header = next(i for i, line in enumerate(lines) if line.split()[:4] == ["step", "checkpoint", "run", "id"])
    rows = lines[header + 1 : lines.index("", header)]  # up to the blank line before the model means
    # one row a child: its step, its folder's name (long names shortened in the middle) and its whole run id
    assert rows[0].split()[:4] == ["0", "sentence-tran...g-local-name", CHILDREN[0], "skipped"]
    assert rows[1].split() == ["50", "step-000050", CHILDREN[1], "measured"]
    assert rows[2].split() == ["100", "step-000100", CHILDREN[2], "measured"]
    assert rows[3].split()[:3] == ["150", "step-000150", "unreadable:"]
    # the reason, wrapped under the status column, is all there
    status_column = lines[header].index("status")
    reason = [rows[3][status_column:]] + [line[status_column:] for line in rows[4:] if line[:status_column].strip() == ""]
    assert all(line[:status_column].strip() == "" for line in rows[4:]) and " ".join(reason) == REASON
    # every statistic's model mean by step, in pandas' column blocks
    for statistic in STATISTICS:
        assert sum(statistic in line.split() for line in lines) == 1, statistic
    assert sum(line.split()[:2] == ["50", "2.012"] for line in lines) == 1 and "32.04" in text


def test_short_values_stay_and_long_ones_keep_both_ends():
    assert _shortened("step-000050", 28) == "step-000050"
    assert _shortened("abcdefghij", 7) == "ab...ij" and len(_shortened("x" * 100, 28)) == 28
    one = format_sweep(SimpleNamespace(**{**vars(sweep_result()), "runs": sweep_result().runs.iloc[1:3]}), jobs=1)
    assert one.splitlines()[1] == "2 children: 2 measured now, 0 already finished" and "at once" not in one
