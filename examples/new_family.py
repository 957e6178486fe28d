"""A worked example of adding a model family: Qwen3, a decoder that attnsim's architecture table does not list.

    python examples/new_family.py        # from the repository's root; about 20 s on a 2-core CPU

It builds a tiny seeded Qwen3 offline (2 layers, 4 query heads sharing 2 key/value heads, the test suite's
tokenizer builder), declares the family in three lines, checks the capture against the model's own
computation, and measures it with ``attnsim.run``. CONTRIBUTING.md ("Adding a model family") walks through
it; tests/test_contributing.py runs it.

The three steps for any family:

1. Find the module paths: ``print(model)`` shows the layer list (``layers``) and, in each layer, the
   Q, K, V projections and the attention output projection W_O, whose *input* is the heads' outputs.
2. Declare the family under its ``config.model_type``: ``ARCHITECTURES["qwen3"] = Architecture(...)``,
   with its :class:`~attnsim.capture.architectures.ModelKind` (``DECODER`` for a causal language model).
3. Check the capture: every head's output Z must equal its attention probabilities times its values,
   computed here from the model's own V projection (:func:`check_capture`).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

# -- step 2: the declaration (step 1 was reading print(model): model.layers[i].self_attn.{q,k,v,o}_proj) --------
from attnsim.capture.architectures import ARCHITECTURES, Architecture, ModelKind  # noqa: E402

QWEN3 = Architecture("layers", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", kind=ModelKind.DECODER)


def register() -> None:
    """Make ``model_type == "qwen3"`` known to attnsim in this process (the Python API; a plugin module would do the same)."""
    ARCHITECTURES["qwen3"] = QWEN3


def build(folder: Path) -> Path:
    """A tiny seeded Qwen3 with its LM head and a tokenizer trained on a few BBC documents, saved to ``folder``."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from tests.helpers.tiny_models import train_tokenizer

    tokenizer = train_tokenizer("llama")  # a SentencePiece-style (▁) tokenizer, as Qwen3's own is byte-level BPE
    config = AutoConfig.for_model(
        "qwen3",
        vocab_size=len(tokenizer),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        intermediate_size=64,
        max_position_embeddings=512,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# -- step 3: the check ---------------------------------------------------------------------------------------
def check_capture(folder: Path, atol: float = 1e-5) -> float:
    """The largest difference between attnsim's captured Z and ``A @ V`` recomputed from the model's V projection.

    Raises:
        AssertionError: a head's captured output is not its attention times its values (wrong module paths).
    """
    from attnsim.capture.architectures import layer_modules
    from attnsim.capture.hooks import forward_with_capture
    from attnsim.capture.load import inspect_model, load_model

    info = inspect_model(str(folder), 32)
    model, _ = load_model(info, attn_implementation="eager", needs_attention=True)
    values = []
    projections = [layer.get_submodule(info.arch.value) for layer in layer_modules(model, info.arch)]
    handles = [v_proj.register_forward_hook(lambda _m, _i, out: values.append(out)) for v_proj in projections]
    ids = torch.randint(3, info.config.vocab_size, (2, 12))
    with torch.no_grad():
        _, capture = forward_with_capture(model, info.arch, info.n_heads, {"input_ids": ids, "attention_mask": torch.ones_like(ids)}, attention=True)
    for handle in handles:
        handle.remove()
    worst = 0.0
    group = info.n_heads // info.config.num_key_value_heads  # query heads per key/value head
    for layer, (z, attention, v) in enumerate(zip(capture.z_layers, capture.attention_layers, values)):
        v = v.view(2, 12, -1, info.config.head_dim).transpose(1, 2).repeat_interleave(group, dim=1)  # (B, H, T, d_head)
        error = float((z - attention @ v).abs().max())
        assert error <= atol, f"layer {layer}: captured Z differs from A @ V by {error:.2e}; check the module paths"
        worst = max(worst, error)
    return worst


def main() -> int:
    import attnsim
    from attnsim.quiet import quiet_libraries

    quiet_libraries()  # transformers' load report (the LM head the base model leaves unused) and Lightning's start-up lines
    register()
    with tempfile.TemporaryDirectory() as tmp:
        folder = build(Path(tmp) / "tiny-qwen3")
        print(f"capture checked: Z equals A @ V within {check_capture(folder):.1e}")
        uri = f"sqlite:///{tmp}/mlflow.db"
        result = attnsim.run(
            "csm",
            [
                f"model.path={folder}",
                "corpus.limit=4",
                "corpus.seq_len=32",
                "tracking.figures=false",
                "plots.examples=0",
                f"tracking.uri={uri}",
                "trainer.progress_bar=false",
            ],
        )
        print(f"attnsim run csm on tiny Qwen3: {result.status}, csm/mean = {result.metrics['csm/mean']:.4g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
