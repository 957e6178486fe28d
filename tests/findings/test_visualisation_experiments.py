"""Every attention-visualisation experiment runs end to end on its defaults (shrunk) and logs its figures."""

from __future__ import annotations

import pytest

from attnsim.config import load_config
from tests.helpers.runs import runs_of

SMALL = ["trainer.progress_bar=false", "plots.examples=1"]

# experiment -> (extra overrides, figures that must be logged, metrics that must be logged, tags)
EXPECTED = {
    "attention_maps": (
        ["corpus.limit=3", "corpus.seq_len=32"],
        ["figures/attention_maps/heads_confidence.png", "figures/attention_maps/mean_attention_L05.png", "figures/attention_maps/window0_attention_L00.png"],
        ["attention_maps/previous_mass/L00/H00", "attention_maps/confidence/L05"],
        {},
    ),
    "rollout": (
        ["corpus.limit=3", "corpus.seq_len=32"],
        ["figures/rollout/depth_profile.png", "figures/rollout/window0_readout.png", "figures/rollout/window0_flow.png", "figures/rollout/window0_matrix.png"],
        ["rollout/cls_mass/L05", "rollout/punct_mass", "rollout/readout_entropy/L00"],
        {},
    ),
    "gradient_maps": (
        ["corpus.limit=3", "corpus.seq_len=32"],
        ["figures/gradient_maps/heads_head_relevance.png", "figures/gradient_maps/window0_cdam.png", "figures/gradient_maps/window0_rollout.png"],
        ["gradient_maps/head_relevance/L00/H00", "gradient_maps/cdam_cls_share", "gradient_maps/target_probability"],
        {"attnsim.classifier_head": "random_seeded", "attnsim.num_labels": "5", "attnsim.target_class": "predicted"},
    ),
    "vit_rollout": (
        ["corpus.limit=2"],
        ["figures/rollout/window0_overlay.png", "figures/rollout/mean_readout_grid.png", "figures/rollout/depth_profile.png"],
        ["rollout/cls_mass/L05", "rollout/self_mass"],
        {"attnsim.model_init": "random", "attnsim.control": "random", "attnsim.seq_len": "197", "attnsim.corpus": "images:skimage.data"},
    ),
    "vit_csm": (
        ["corpus.limit=2"],
        ["figures/csm/mean_csm.png", "figures/csm/distance_profiles.png"],
        ["csm/mean/L05", "distance/short_range_share"],
        {"attnsim.model_init": "random", "attnsim.seq_len": "197"},
    ),
}


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_experiment_runs_on_defaults(name, tracking_uri):
    from attnsim.workflows.run import run

    overrides, figures, metrics, tags = EXPECTED[name]
    cfg = load_config(name)
    assert cfg.tracking.experiment == name and cfg.plots.explorer
    result = run(name, overrides + SMALL)
    client, runs = runs_of(tracking_uri)
    (logged,) = [r for r in runs if r.info.run_id == result.run_id]
    assert logged.info.status == "FINISHED"
    folders = {path.rsplit("/", 1)[0] for path in figures}
    artifacts = {a.path for folder in folders for a in client.list_artifacts(result.run_id, folder)}
    assert set(figures) <= artifacts, set(figures) - artifacts
    assert "explorer.html" in {a.path for a in client.list_artifacts(result.run_id)}
    for key in metrics:
        assert key in logged.data.metrics, key
    for key, value in tags.items():
        assert logged.data.tags.get(key) == value, (key, logged.data.tags.get(key))


def test_rollout_uses_eval_mode_attention(tmp_path, text_dir, tracking_uri):
    """Attention dropout is off in predict: two runs of a model with dropout 0.9 give the same rollout."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    from attnsim.workflows.run import run
    from tests.helpers.models import BUNDLED

    tokenizer = AutoTokenizer.from_pretrained(BUNDLED)
    BertModel(
        BertConfig(
            vocab_size=len(tokenizer),
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            attention_probs_dropout_prob=0.9,
            hidden_dropout_prob=0.9,
        )
    ).save_pretrained(tmp_path / "model")
    tokenizer.save_pretrained(tmp_path / "model")
    args = [
        f"model.path={tmp_path / 'model'}",
        "corpus=text",
        f"corpus.path={text_dir}",
        "corpus.seq_len=24",
        "corpus.limit=4",
        "tracking.figures=false",
        "trainer.progress_bar=false",
    ]
    first, second = run("rollout", args), run("rollout", args)
    for key, value in first.summaries["rollout"].scalars.items():
        assert value.equal(second.summaries["rollout"].scalars[key]), key
