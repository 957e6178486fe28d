"""Vision Transformers on images of another size than config.image_size.

An image processor that resizes to a size other than ``config.image_size`` either runs (ViT and
DeiT get ``interpolate_pos_encoding=True``, DINOv2 always resamples its position embeddings) with
the patch grid taken from the processed images, or is refused before any run exists.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from attnsim.capture.architectures import ARCHITECTURES, Architecture, ModelKind
from attnsim.capture.vision import check_image_size, vision_inputs
from attnsim.errors import ModelError
from tests.helpers.models import save_tiny_vit
from tests.helpers.runs import runs_of


@pytest.fixture(scope="module")
def pictures(tmp_path_factory) -> Path:
    """Two pictures of different sizes (both are resized by the processor)."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("pictures")
    rng = np.random.default_rng(1)
    for i, (h, w) in enumerate(((50, 70), (64, 40))):
        Image.fromarray((rng.random((h, w, 3)) * 255).astype(np.uint8)).save(folder / f"p{i}.png")
    return folder


def resize_processor(path: Path, height: int, width: int) -> Path:
    """Rewrite the model's preprocessor_config.json to resize to height x width."""
    config_file = path / "preprocessor_config.json"
    config = json.loads(config_file.read_text())
    config["size"] = {"height": height, "width": width}
    config_file.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize(
    "kind, experiment, size, extra",
    [
        ("vit", "vit_rollout", (32, 24), 1),  # the 224 x 160 case in small: 4 x 3 patches of 8 pixels
        ("dinov2_registers", "vit_rollout", (32, 24), 3),  # [CLS] + 2 registers
        ("dinov2_registers", "vit_rollout", (36, 30), 3),  # not a whole number of patches: 4 x 3, the rest left out (416 px at 14)
        ("deit", "vit_csm", (48, 40), 2),  # larger than the model's 32 x 32: 6 x 5 patches
        ("vit", "gradient_maps", (32, 24), 1),  # the classifier's forward (gradient capture) too
    ],
)
def test_processor_size_other_than_config_runs_on_its_grid(tmp_path, pictures, tracking_uri, kind, experiment, size, extra):
    from attnsim.plots.maps import grid_values
    from attnsim.workflows.run import run

    model = resize_processor(save_tiny_vit(tmp_path / kind, kind, image_size=32), *size)
    rows, cols = size[0] // 8, size[1] // 8
    seq_len = extra + rows * cols
    result = run(experiment, [f"model.path={model}", "corpus=images", f"corpus.path={pictures}", "trainer.progress_bar=false", "plots.examples=1"])
    _, runs = runs_of(tracking_uri)
    (logged,) = runs
    assert logged.info.status == "FINISHED" and logged.data.tags["attnsim.seq_len"] == str(seq_len)
    if experiment == "vit_rollout":
        summary = result.summaries["rollout"]
        assert summary.figure_data["readout_mean"].shape == (2, seq_len)
        example = summary.examples[0]
        assert example["image"].shape == (size[0], size[1], 3)
        saliency = grid_values(example["readout"][-1], extra, (rows, cols))
        assert saliency.shape == (rows, cols) and np.isfinite(saliency).all()
        assert example["labels"][extra] == "r0c0" and example["labels"][-1] == f"r{rows - 1}c{cols - 1}"
    if experiment == "gradient_maps":
        assert "figures/gradient_maps/window0_overlay.png" in {a.path for a in runs_of(tracking_uri)[0].list_artifacts(result.run_id, "figures/gradient_maps")}


def test_vit_gets_interpolate_pos_encoding_only_off_its_own_size():
    from transformers import AutoConfig

    config = AutoConfig.for_model("vit", image_size=32, patch_size=8)
    vit, dinov2 = ARCHITECTURES["vit"], ARCHITECTURES["dinov2_with_registers"]
    other, native = torch.zeros(1, 3, 32, 24), torch.zeros(1, 3, 32, 32)
    assert vision_inputs(other, config, vit)["interpolate_pos_encoding"] is True
    assert set(vision_inputs(native, config, vit)) == {"pixel_values"}  # trained embeddings as they are
    assert set(vision_inputs(other, config, dinov2)) == {"pixel_values"}  # DINOv2's forward has no such argument
    assert ARCHITECTURES["deit"].interpolation == "argument" and ARCHITECTURES["dinov2"].interpolation == "always"


def test_sizes_the_model_cannot_take_are_refused_with_the_fix():
    from transformers import AutoConfig

    square = AutoConfig.for_model("vit", image_size=32, patch_size=8)
    fixed = Architecture("layers", "q", "k", "v", "o", kind=ModelKind.VISION, interpolation="none")
    check_image_size(square, fixed, (32, 32))  # its own size: fine
    with pytest.raises(ModelError, match=r"32x24 pixels.*takes only its config.image_size 32x32.*\"height\": 32, \"width\": 32"):
        check_image_size(square, fixed, (32, 24))
    wide = AutoConfig.for_model("vit", image_size=[32, 48], patch_size=8)
    check_image_size(wide, ARCHITECTURES["vit"], (32, 48))
    with pytest.raises(ModelError, match=r"only from a square grid of patches \(this model has 4x6\)"):
        check_image_size(wide, ARCHITECTURES["vit"], (32, 32))
    wide_dino = AutoConfig.for_model("dinov2", image_size=[32, 48], patch_size=8)
    with pytest.raises(ModelError, match="4x6 patches. Use a model whose config.image_size is square"):
        check_image_size(wide_dino, ARCHITECTURES["dinov2"], (32, 48))


def test_refused_before_any_run(tmp_path, pictures, tracking_uri):
    """A ViT trained on 32 x 48 images cannot resample to 32 x 32: refused before weights load or a run exists."""
    from attnsim.workflows.run import run

    model = resize_processor(save_tiny_vit(tmp_path / "wide", "vit", image_size=(32, 48)), 32, 32)
    with pytest.raises(ModelError, match="square grid of patches"):
        run("vit_rollout", [f"model.path={model}", f"corpus.path={pictures}", "trainer.progress_bar=false"])
    _, runs = runs_of(tracking_uri)
    assert runs == []
