"""Vision Transformers: token layout from the config, images, grid distance, and vit runs on tiny models built here."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attnsim.capture.vision import check_layout
from attnsim.data.layout import PatchLabeler, TokenLayout, token_layout
from attnsim.errors import ConfigError, CorpusError, ModelError
from tests.helpers.models import save_tiny_vit
from tests.helpers.runs import runs_of

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, attn_implementation="eager")


@pytest.fixture(scope="module")
def image_dir(tmp_path_factory) -> Path:
    """Three small pictures (PNG and JPEG) and a file that is not an image."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("images")
    rng = np.random.default_rng(0)
    for i, suffix in enumerate((".png", ".jpg", ".png")):
        picture = (rng.random((40 + 8 * i, 56, 3)) * 255).astype(np.uint8)
        picture[10:30, 10:30] = 255  # a bright square
        Image.fromarray(picture).save(folder / f"picture{i}{suffix}")
    (folder / "notes.txt").write_text("not an image")
    return folder


@pytest.mark.parametrize(
    "kind, image_size, extra, grid",
    [
        ("vit", 32, ("[CLS]",), (4, 4)),
        ("deit", 32, ("[CLS]", "[DIST]"), (4, 4)),
        ("dinov2_registers", 32, ("[CLS]", "[REG0]", "[REG1]"), (4, 4)),
        ("vit", (32, 48), ("[CLS]",), (4, 6)),
    ],
)
def test_layout_comes_from_config_and_matches_the_model(tmp_path, kind, image_size, extra, grid):
    from transformers import AutoConfig, AutoModel

    path = save_tiny_vit(tmp_path, kind, image_size, processor=False)
    config = AutoConfig.from_pretrained(path)
    layout = token_layout(config)
    assert layout.extra == extra and layout.grid == grid
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    check_layout(model, layout)
    height, width = layout.image
    with torch.no_grad():
        attention = model(pixel_values=torch.randn(1, 3, height, width), output_attentions=True).attentions[0]
    assert attention.shape[-1] == layout.seq_len  # e.g. 2 + 16 = 18 for DeiT: not a square plus one
    labels = PatchLabeler(layout).convert_ids_to_tokens(range(layout.seq_len))
    assert labels[: len(extra)] == list(extra) and labels[len(extra)] == "r0c0" and labels[-1] == f"r{grid[0] - 1}c{grid[1] - 1}"
    wrong = TokenLayout(extra + ("[DIST]",), grid, layout.patch, layout.image)
    with pytest.raises(ModelError, match="extra tokens"):
        check_layout(model, wrong)


def test_image_not_a_whole_number_of_patches(tmp_path):
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(save_tiny_vit(tmp_path, "vit", processor=False))
    # the whole patches, as the patch convolution takes them: the last 6 rows of pixels are left out
    assert token_layout(config, (30, 32)).grid == (3, 4)
    with pytest.raises(ModelError, match="no whole 8x8 patch"):
        token_layout(config, (6, 32))


def test_image_sources_and_preprocessing(tmp_path, image_dir):
    from transformers import AutoConfig

    from attnsim.data.images import ImageDataModule, build_image_corpus

    path = save_tiny_vit(tmp_path / "vit", "vit")
    config = AutoConfig.from_pretrained(path)
    corpus = build_image_corpus(str(path), config, str(image_dir))
    assert [item.doc_id for item in corpus.windows] == ["picture0.png", "picture1.jpg", "picture2.png"]
    assert corpus.seq_len == 17 and corpus.windows[0].pixel_values.shape == (3, 32, 32) and corpus.windows[0].display.shape == (32, 32, 3)
    # the model's own image processor (rescale 1/255, mean = std = 0.5) and the config-only resize agree
    resized = build_image_corpus(None, config, str(image_dir))
    assert np.allclose(resized.windows[1].pixel_values, corpus.windows[1].pixel_values, atol=0.02)
    assert corpus.content_hash == build_image_corpus(str(path), config, str(image_dir)).content_hash
    batch = next(iter(ImageDataModule(corpus, batch_size=2).predict_dataloader()))
    assert batch["pixel_values"].shape == (2, 3, 32, 32) and batch["special_mask"][0].tolist() == [True] + [False] * 16
    assert torch.isnan(batch["positions"][0]).all() and batch["positions"][16].tolist() == [3.0, 3.0]
    samples = build_image_corpus(None, config, None, limit=2)
    assert [item.doc_id for item in samples.windows] == ["skimage/astronaut", "skimage/camera"]
    with pytest.raises(CorpusError, match="does not exist"):
        build_image_corpus(None, config, str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match="no images"):
        build_image_corpus(None, config, str(tmp_path / "empty"))


def test_vit_rollout_and_csm_runs(tmp_path, image_dir, tracking_uri):
    from attnsim.workflows.run import run

    vit = save_tiny_vit(tmp_path / "vit", "vit")
    result = run("vit_rollout", [f"model.path={vit}", f"corpus.path={image_dir}", "trainer.progress_bar=false", "plots.examples=2", "maps.discard_ratio=0.5"])
    client, runs = runs_of(tracking_uri)
    (rollout_run,) = [r for r in runs if r.info.run_id == result.run_id]
    assert rollout_run.info.status == "FINISHED" and rollout_run.data.tags["attnsim.seq_len"] == "17"
    artifacts = {a.path for a in client.list_artifacts(result.run_id, "figures/rollout")}
    assert {"figures/rollout/window0_overlay.png", "figures/rollout/window1_overlay.png", "figures/rollout/mean_readout_grid.png"} <= artifacts
    assert 0.0 < rollout_run.data.metrics["rollout/cls_mass/L01"] < 1.0
    assert "rollout/extra_mass" in rollout_run.data.metrics  # ViT categories: [CLS] and the other extra tokens
    deit = save_tiny_vit(tmp_path / "deit", "deit", processor=False)
    result = run("vit_csm", [f"model.path={deit}", f"corpus.path={image_dir}", "trainer.progress_bar=false", "plots.examples=1"])
    client, runs = runs_of(tracking_uri)
    (csm_run,) = [r for r in runs if r.info.run_id == result.run_id]
    assert csm_run.info.status == "FINISHED" and csm_run.data.tags["attnsim.seq_len"] == "18"
    # distances on a 4 x 4 grid are at most round(sqrt 18) = 4 patches: every high pair is short range
    assert csm_run.data.metrics["distance/short_range_share"] == pytest.approx(1.0)
    assert 1.0 <= csm_run.data.metrics["distance/high_mean_distance"] <= 4.0


def test_vit_gradient_maps_run(tmp_path, image_dir, tracking_uri):
    from attnsim.workflows.run import run

    vit = save_tiny_vit(tmp_path / "vit", "vit")
    result = run(
        "gradient_maps",
        [f"model.path={vit}", "corpus=images", f"corpus.path={image_dir}", "trainer.progress_bar=false", "plots.examples=1", "maps.target_class=2"],
    )
    client, runs = runs_of(tracking_uri)
    (grad_run,) = [r for r in runs if r.info.run_id == result.run_id]
    assert grad_run.data.tags["attnsim.classifier_head"] == "checkpoint" and grad_run.data.tags["attnsim.target_class"] == "2"
    assert "figures/gradient_maps/window0_overlay.png" in {a.path for a in client.list_artifacts(result.run_id, "figures/gradient_maps")}
    assert grad_run.data.metrics["gradient_maps/target_is_predicted"] <= 1.0


def test_images_need_a_vision_model_and_back(tiny_bert, tmp_path, tracking_uri):
    from attnsim.workflows.run import run

    with pytest.raises(ConfigError, match="needs a Vision Transformer"):
        run("vit_csm", [f"model.path={tiny_bert}"])
    vit = save_tiny_vit(tmp_path / "vit", "vit", processor=False)
    with pytest.raises(ConfigError, match="needs corpus.source=images"):
        run("csm", [f"model.path={vit}"])
    _, runs = runs_of(tracking_uri)
    assert runs == []  # refused before any run was created
