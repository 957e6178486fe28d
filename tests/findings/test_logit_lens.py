"""The ``logit_lens`` finding on tiny Llama and GPT-2: its last layer is the model's own next-token loss and accuracy,
and a run logs the per-layer statistics and the loss-by-layer figure."""

from __future__ import annotations

import pytest
import torch

from attnsim.capture.load import inspect_model, load_tokenizer
from attnsim.capture.residual import ResidualModule
from attnsim.findings.logit_lens import LogitLensFinding
from tests.helpers.tiny_models import save_tiny


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_the_last_layer_is_the_models_own_loss_and_accuracy(family, tmp_path, monkeypatch):
    from transformers import AutoModelForCausalLM

    import attnsim.findings.logit_lens as lens

    monkeypatch.setattr(lens, "CHUNK", 5)  # several blocks of positions per batch
    path = save_tiny(tmp_path, family)
    info = inspect_model(str(path), 32)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    tokenizer = load_tokenizer(info, 32)
    tokenizer.pad_token = tokenizer.pad_token or tokenizer.eos_token
    encoded = tokenizer(["The minister said the plan would cost more.", "Shares fell."], padding=True, return_tensors="pt")
    finding = LogitLensFinding(info.n_layers, info.n_heads, 32, None)
    with torch.no_grad():
        finding.update(ResidualModule(model, info, LogitLensFinding.residual).predict_step(dict(encoded), 0))
        logits = model(**encoded).logits
    summary = finding.summarise()
    ids, mask = encoded["input_ids"], encoded["attention_mask"]
    valid = mask[:, :-1].bool() & mask[:, 1:].bool()
    own = logits[:, :-1][valid]
    targets = ids[:, 1:][valid]
    loss = float(torch.nn.functional.cross_entropy(own, targets))
    accuracy = float((own.argmax(-1) == targets).double().mean())
    assert abs(summary.metrics["final_loss"] - loss) < 1e-5
    assert summary.metrics["final_accuracy"] == pytest.approx(accuracy, abs=1e-12)
    assert summary.scalars["loss"].shape == (info.n_layers, 1)
    assert float(summary.scalars["agreement"][-1, 0]) == 1.0


def test_a_logit_lens_run_logs_loss_by_layer_and_its_figure(tmp_path, tracking_uri):
    from mlflow import MlflowClient

    import attnsim

    path = save_tiny(tmp_path / "gpt2", "gpt2")
    result = attnsim.run("logit_lens", [f"model.path={path}", "corpus.limit=4", "corpus.seq_len=32", "trainer.batch_size=2", "trainer.progress_bar=false"])
    client = MlflowClient(tracking_uri)
    metrics = client.get_run(result.run_id).data.metrics
    assert {"logit_lens/loss/L00", "logit_lens/loss/L01", "logit_lens/accuracy/L01", "logit_lens/final_loss"} <= set(metrics)
    assert metrics["logit_lens/loss/L01"] == pytest.approx(metrics["logit_lens/final_loss"])
    assert "loss_by_layer.png" in [a.path.rsplit("/", 1)[-1] for a in client.list_artifacts(result.run_id, "figures/logit_lens")]


def test_trace_lens_last_layer_is_the_models_own_next_token_distribution(tmp_path):
    from transformers import AutoModelForCausalLM

    import attnsim
    from attnsim.findings.logit_lens import trace_lens

    path = save_tiny(tmp_path, "gpt2")
    t = attnsim.trace(["Shares fell sharply on Monday.", "Shares fell."], model=str(path), names=["resid_post"])
    lens = trace_lens(t, str(path), position=-1, k=3, text=1)
    assert len(lens) == 2 and all(len(top) == 3 for top in lens)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    real = int(t.mask[1].sum())
    with torch.no_grad():
        probs = model(input_ids=t.tokens[1:, :real]).logits[0, -1].softmax(-1)
    expected = probs.topk(3)
    tokenizer = load_tokenizer(inspect_model(str(path), 32), 32)
    assert [tok for tok, _ in lens[-1]] == tokenizer.convert_ids_to_tokens(expected.indices.tolist())
    assert [p for _, p in lens[-1]] == pytest.approx(expected.values.tolist(), abs=1e-5)
