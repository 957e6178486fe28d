"""Malformed model folders: empty or truncated weights, no tokenizer files, and a half-written checkpoint inside a
sweep; each refused with the file and the fix before any run, and a sweep goes on past the bad checkpoint."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mlflow import MlflowClient

import attnsim
from attnsim.capture.load import check_weight_files, inspect_model
from attnsim.cli import main
from attnsim.errors import ConfigError, ModelError
from tests.helpers.runs import SWEEP, runs_of, tiny_fit


@pytest.fixture
def broken(tiny_bert, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_bert, folder)
    return folder


@pytest.mark.parametrize("keep, message", [(0, "is empty"), (5, "is truncated"), (40, "damaged or truncated"), (-100, "its tensors need")])
def test_truncated_weights_are_refused_before_any_run(broken, tracking_uri, capsys, keep, message):
    weights = broken / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:keep] if keep >= 0 else data[:keep])
    with pytest.raises(ModelError, match=message):
        check_weight_files(str(broken))
    assert main(["run", "csm", f"model.path={broken}", "corpus.limit=2"]) == 2
    err = capsys.readouterr().err
    assert "model.safetensors" in err and "Save or copy the model again" in err and "Traceback" not in err
    assert runs_of(tracking_uri)[1] == []


def test_a_folder_without_tokenizer_files_says_so(broken, tracking_uri, capsys):
    for path in broken.iterdir():
        if path.name not in ("config.json", "model.safetensors"):
            path.unlink()
    assert main(["run", "csm", f"model.path={broken}", "corpus.limit=2"]) == 2
    err = capsys.readouterr().err
    assert "has no tokenizer files" in err and "tokenizer.save_pretrained" in err
    assert runs_of(tracking_uri)[1] == []
    assert inspect_model(str(broken), 32).n_layers == 2  # the model itself is fine


def test_a_sweep_goes_on_past_a_half_written_checkpoint(tiny_bert, tracking_uri, tmp_path):
    tuned = attnsim.finetune(overrides=tiny_fit(tiny_bert, tmp_path / "ckpt", steps=4, every=2))
    weights = Path(tuned.checkpoint_dir) / "step-000002" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])  # a checkpoint half written when the disk filled
    result = attnsim.sweep("csm", str(tuned.checkpoint_dir), SWEEP)
    status = dict(zip(result.runs["step"], result.runs["status"]))
    assert status[0] == "measured" and status[4] == "measured"
    assert status[2].startswith("unreadable: Weights file") and "truncated" in status[2]
    parent = MlflowClient(tracking_uri).get_run(result.parent_run_id)
    assert parent.info.status == "FINISHED" and "step 2: Weights file" in parent.data.tags["attnsim.sweep_unreadable"]


def test_a_dense_run_that_cannot_fit_is_refused_before_loading(tiny_bert, tracking_uri, capsys, monkeypatch):
    from attnsim.capture import load

    info = inspect_model(str(tiny_bert), 128)
    square, pairs = 8 * 4 * 128 * 128 * 4, 128 * 127 // 2  # one layer's (batch, heads, T, T) float32 maps; P
    statistics = 2 * square + pairs * (56 + 62 * 8) + 8 * 2 * 4 * pairs * 8 + 2 * 4 * pairs * 4  # maps, tables, walk of 8 windows, sums
    assert load.dense_memory(info, 128, 8) == max(2 * square + 3 * square, statistics) + 2 * 2 * 8 * 4 * 128 * 8 * 4  # + Z and its copy
    monkeypatch.setattr(load, "available_memory", lambda: 2 * load.dense_memory(info, 128, 1))  # room for two windows
    assert main(["run", "paper", f"model.path={tiny_bert}", "corpus.limit=8", "trainer.batch_size=8", "capture.path=dense"]) == 2
    err = capsys.readouterr().err
    assert "capture.path=dense keeps every layer's attention maps" in err and "Use capture.path=blockwise" in err and "trainer.batch_size to at most 2" in err
    assert runs_of(tracking_uri)[1] == []
    load.check_dense_fits(info, 128, 8, "blockwise", True)  # the blockwise path keeps no T x T maps: nothing to refuse
    with pytest.raises(ConfigError, match="the statistics' pair tables and CSM walk of a batch of 8 windows"):
        load.check_dense_fits(info, 128, 8, "dense", False)  # Z only (csm): no attention maps, but the pair tables of 8 windows
    load.check_dense_fits(info, 128, 8, "dense", False, windows=1)  # a corpus of one window: batches of one


def test_weights_of_another_model_are_refused_not_started_at_random(broken, tracking_uri, capsys):
    """A valid safetensors file whose tensors are not the config's: transformers would start the model at random and
    only log it; attnsim refuses, so an untrained model is never measured under the tag 'pretrained'."""
    import torch
    from safetensors.torch import save_file

    save_file({"foo.weight": torch.zeros(2, 2)}, str(broken / "model.safetensors"))
    assert main(["run", "csm", f"model.path={broken}", "corpus.limit=2"]) == 2
    err = capsys.readouterr().err
    assert "do not fit its config" in err and "weight tensors are missing" in err and "model.init=random" in err
    assert runs_of(tracking_uri)[1] == []
    assert (
        main(
            [
                "run",
                "csm",
                f"model.path={broken}",
                "corpus.limit=2",
                "model.init=random",
                "corpus.seq_len=32",
                "tracking.figures=false",
                "trainer.progress_bar=false",
            ]
        )
        == 0
    )  # on purpose


def test_a_config_json_that_cannot_be_read_and_a_missing_path_say_so(broken, tmp_path, capsys):
    config = broken / "config.json"
    config.write_text(config.read_text().replace('"num_hidden_layers": 2', '"num_hidden_layers": "two"'))
    assert main(["run", "csm", f"model.path={broken}"]) == 2
    err = capsys.readouterr().err
    assert f"The config.json in '{broken}' cannot be read as a model config" in err and "num_hidden_layers" in err and "Traceback" not in err
    config.write_text("{not json")
    assert main(["run", "csm", f"model.path={broken}"]) == 2
    assert "cannot be read as a model config" in capsys.readouterr().err
    assert main(["run", "csm", f"model.path={tmp_path / 'no_such_model'}"]) == 2
    assert f"Model path '{tmp_path / 'no_such_model'}' does not exist" in capsys.readouterr().err


def test_a_folder_without_weights_or_missing_a_shard_is_refused_before_any_run(broken, tracking_uri, capsys):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(broken)
    (broken / "model.safetensors").unlink()  # config.json and tokenizer files, no weights
    assert main(["run", "csm", f"model.path={broken}", "corpus.limit=2"]) == 2
    err = capsys.readouterr().err
    assert f"Model folder '{broken}' has a config.json but no weights file" in err and "model.save_pretrained(FOLDER)" in err
    model.save_pretrained(broken, max_shard_size="1MB")  # a sharded set: model.safetensors.index.json and its shards
    shards = sorted(broken.glob("model-*-of-*.safetensors"))
    assert len(shards) >= 2 and (broken / "model.safetensors.index.json").is_file()
    shards[1].unlink()
    assert main(["run", "csm", f"model.path={broken}", "corpus.limit=2"]) == 2
    err = capsys.readouterr().err
    assert f"1 of the {len(shards)} shards that model.safetensors.index.json lists is missing ({shards[1].name})" in err and "Traceback" not in err
    assert runs_of(tracking_uri)[1] == []


def test_a_folder_missing_one_tensor_is_refused_naming_it(broken, tracking_uri, capsys):
    """One tensor gone from an otherwise whole file: transformers would start it at random; refused with its name."""
    from safetensors.torch import load_file, save_file

    weights = load_file(str(broken / "model.safetensors"))
    gone = next(k for k in sorted(weights) if "layer.1.attention.self.query.weight" in k)
    save_file({k: v for k, v in weights.items() if k != gone}, str(broken / "model.safetensors"), metadata={"format": "pt"})
    assert main(["run", "csm", f"model.path={broken}", "corpus.limit=2"]) == 2
    err = capsys.readouterr().err
    assert f"1 of the model's {len(weights)} weight tensors are missing (encoder.layer.1.attention.self.query.weight)" in err
    assert "model.init=random" in err and runs_of(tracking_uri)[1] == []


def test_a_task_model_without_its_head_is_refused(tmp_path):
    """A checkpoint that says it is a causal LM but whose (untied) LM head is gone: the head would be random."""
    from safetensors.torch import load_file, save_file

    from attnsim.capture.interventions import load_task_model
    from tests.helpers.tiny_models import save_tiny

    path = save_tiny(tmp_path / "llama", "llama", tie_word_embeddings=False)
    info = inspect_model(str(path), 32)
    assert load_task_model(info)[1] == "causal_lm"  # whole: loads
    weights = load_file(str(path / "model.safetensors"))
    save_file({k: v for k, v in weights.items() if k != "lm_head.weight"}, str(path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ModelError, match=r"1 of the model's \d+ weight tensors are missing \(lm_head.weight\)"):
        load_task_model(info)
