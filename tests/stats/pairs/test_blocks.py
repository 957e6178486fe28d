"""Long contexts: the blockwise path (Q/K captured under SDPA, attention recomputed by blocks of query rows,
streaming exact top-k) gives the dense path's statistics and high pairs (README, "Long contexts")."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from attnsim.capture.queries import QueryKey, check_recomputable, recording, register
from attnsim.errors import ModelError
from attnsim.stats.pairs import exact_top
from attnsim.stats.pairs.blocks import BlockPairView, StreamingTop, _diagonal_sums, decode_pairs
from attnsim.stats.pairs.scores import attention_rows
from tests.helpers.blockwise import bert_pair, blockwise_finding_objects, blockwise_findings, capture_batch, dense_and_blockwise, windows_batch


@pytest.mark.parametrize("seq_len", [256, 512])
def test_blockwise_equals_dense(tokenizer, seq_len):
    """Every statistic of `paper` within 1e-5 relative, and the same high-CSM and high-attention pairs, on
    BBC windows (one padded) at T = 256 and 512, blocks of 96 query rows (not dividing T): the dense view
    of a capture (its T x T maps) against the blockwise view of the same capture (queries and keys)."""
    eager, recorded = bert_pair(len(tokenizer))
    batch = windows_batch(tokenizer, seq_len, 3)
    assert bool((batch["attention_mask"] == 0).any()), "the test needs a padded window"
    capture = capture_batch(recorded, batch, "blockwise")
    # the recomputed probabilities are eager attention's (to float32 rounding), on every real query row
    real = batch["attention_mask"].bool()[:, None, :, None]
    for layer, maps in enumerate(capture_batch(eager, batch, "dense").attention_layers):
        assert float(((attention_rows(capture.query_keys[layer], 0, seq_len) - maps).abs() * real).max()) < 1e-5
    (dense, dense_view), (blocks, block_view) = dense_and_blockwise(capture, batch, seq_len, tokenizer)
    assert isinstance(block_view, BlockPairView) and not isinstance(dense_view, BlockPairView)
    assert torch.equal(dense_view.high_index, block_view.high_index.long())
    assert torch.equal(dense_view.attention_index, block_view.attention_index.long())
    compared = 0
    for a, b in zip(dense, blocks):
        for key, acc in a.accumulators.items():
            got, want = b.accumulators[key].compute(), acc.compute()
            for name, value in want.items():
                other = got[name]
                assert other.shape == value.shape, (a.name, name)
                if value.is_floating_point():
                    scale = value.abs().nan_to_num(0).max().clamp_min(1e-30)
                    # relative to each value, and to the statistic's scale where a value is a near-cancelling sum
                    torch.testing.assert_close(other.double(), value.double(), rtol=1e-5, atol=1e-6 * float(scale), equal_nan=True, msg=f"{a.name}/{name}")
                else:
                    assert torch.equal(other, value), (a.name, name)
                compared += 1
    assert compared >= 57  # every statistic of the eight findings


def test_streaming_top_keeps_the_lowest_index_among_ties():
    """Exact top-k across blocks with ties at the k-th value, against exact_top over the whole row."""
    rng = np.random.default_rng(0)
    values = rng.integers(0, 5, 400).astype(np.float32)  # many ties
    for k in (1, 7, 50, 399):
        top = StreamingTop(k)
        for start in range(0, 400, 37):
            block = values[start : start + 37]
            chosen = np.flatnonzero(block > top.threshold)
            top.push(block[chosen], chosen + start)
        want = exact_top(torch.from_numpy(values), k).sort().values
        assert torch.equal(top.result(k, 400), want), k


def test_pair_decoding_and_distance_sums():
    """decode_pairs inverts the row-major pair numbering; _diagonal_sums sums a block by distance j - i."""
    seq_len = 9
    rows, cols = torch.triu_indices(seq_len, seq_len, 1)
    got_r, got_c, listed = decode_pairs(torch.arange(rows.numel() + 1), seq_len)
    assert torch.equal(got_r[:-1], rows) and torch.equal(got_c[:-1], cols)
    assert listed.tolist() == [True] * rows.numel() + [False]
    block = torch.triu(torch.arange(1.0, 82.0).view(9, 9), 1)[3:7]  # rows 3..6, zero at and below the diagonal
    want = torch.zeros(9)
    for r in range(4):
        for j in range(9):
            if j > r + 3:
                want[j - r - 3] += block[r, j]
    assert torch.equal(_diagonal_sums(block, 3), want)


def test_recorded_queries_give_eager_probabilities_for_gqa_rotary_and_sliding_window():
    """Llama (rotary, grouped key/value heads, causal) and Mistral (sliding window): attention_rows from the
    recorded queries and keys equals eager attention on every real query row."""
    from transformers import AutoModel
    from transformers.integrations.sdpa_attention import repeat_kv

    from attnsim.stats.pairs.scores import head_keys
    from tests.helpers.tiny_models import tiny_config

    name = register()
    for config in (tiny_config("llama", 100), tiny_config("mistral", 100, sliding_window=6)):
        torch.manual_seed(0)
        eager = AutoModel.from_config(copy.deepcopy(config), attn_implementation="eager").eval()
        fast = AutoModel.from_config(copy.deepcopy(config), attn_implementation=name).eval()
        fast.load_state_dict(eager.state_dict())
        ids = torch.randint(3, 100, (2, 20))
        mask = torch.ones(2, 20, dtype=torch.long)
        mask[1, 15:] = 0
        with torch.no_grad():
            want = eager(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
            with recording() as store:
                fast(input_ids=ids, attention_mask=mask)
        assert len(store) == config.num_hidden_layers
        heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
        assert store[0].key.shape[1] == kv_heads  # keys kept once per key/value head, repeated to the query heads as repeat_kv does
        assert torch.equal(head_keys(store[0].key, heads, 1), repeat_kv(store[0].key, heads // kv_heads))
        for layer, qk in enumerate(store):
            got = torch.cat([attention_rows(qk, start, min(start + 8, 20)) for start in range(0, 20, 8)], 2)
            real = mask.bool()[:, None, :, None]
            assert float(((got - want[layer]).abs() * real).max()) < 1e-6, (config.model_type, layer)


def test_score_changes_the_recomputation_cannot_reproduce_are_refused():
    """Soft-capping (Gemma 2 style), ALiBi and relative position biases: a ModelError naming capture.path=dense."""
    from types import SimpleNamespace

    for config in (SimpleNamespace(attn_logit_softcapping=50.0), SimpleNamespace(model_type="bloom"), SimpleNamespace(relative_attention_num_buckets=32)):
        with pytest.raises(ModelError, match="capture.path=dense"):
            check_recomputable(config)
    check_recomputable(SimpleNamespace(model_type="llama", position_embedding_type="absolute"))
    assert QueryKey  # the record type is public


def test_capture_path_choice_is_automatic_overridable_and_refused_where_it_cannot_run():
    """auto: blockwise above capture.blockwise_above tokens for text, streamed at or below it (dense without
    attention); dense for images and gradients; blockwise asked for images is a ConfigError before any model loads."""
    from types import SimpleNamespace

    from attnsim.capture.architectures import architecture_for
    from attnsim.capture.load import ModelInfo, choose_capture_path
    from attnsim.errors import ConfigError

    text = ModelInfo("x", "x", "llama", 4, 8, 32, 256, 8192, architecture_for("llama"), SimpleNamespace(model_type="llama"))
    image = ModelInfo("x", "x", "vit", 2, 4, 8, 32, 0, architecture_for("vit"), SimpleNamespace(model_type="vit"))
    assert choose_capture_path("auto", 512, 512, text, True) == "streamed"
    assert choose_capture_path("auto", 512, 512, text, False) == "dense"
    assert choose_capture_path("auto", 513, 512, text, True) == "blockwise"
    assert choose_capture_path("dense", 8192, 512, text, True) == "dense"
    assert choose_capture_path("blockwise", 64, 512, text, True) == "blockwise"
    assert choose_capture_path("auto", 4096, 512, image, True) == "dense"
    assert choose_capture_path("auto", 4096, 512, text, True, needs_gradients=True) == "dense"
    with pytest.raises(ConfigError, match="capture.path=dense"):
        choose_capture_path("blockwise", 64, 512, image, True)
    soft = ModelInfo("x", "x", "llama", 4, 8, 32, 256, 8192, architecture_for("llama"), SimpleNamespace(model_type="gemma2", attn_logit_softcapping=50.0))
    with pytest.raises(ModelError, match="soft-capping"):
        choose_capture_path("auto", 4096, 512, soft, True)
    assert choose_capture_path("auto", 4096, 512, soft, False) == "blockwise"  # no attention recomputed: CSM only
    with pytest.raises(ConfigError, match="high_rule=top_fraction"):
        choose_capture_path("auto", 4096, 512, text, True, high_rule="zscore")
    assert choose_capture_path("auto", 256, 512, text, True, high_rule="zscore") == "streamed"


def test_findings_without_a_blockwise_form_run_dense_under_auto_and_are_refused_under_blockwise(tiny_bert, tmp_path):
    """rollout, attention_maps, induction (no blockwise form): auto keeps them on the dense path at any length; an
    explicit capture.path=blockwise is refused before any model loads or store opens, naming them."""
    from types import SimpleNamespace

    from attnsim.capture.architectures import architecture_for
    from attnsim.capture.load import ModelInfo, choose_capture_path
    from attnsim.errors import ConfigError
    from attnsim.findings.registry import FINDINGS
    from attnsim.workflows.run import run, without_blockwise

    assert set(blockwise_findings()) >= {"csm", "distance", "sentences", "anchors", "repetition", "attention_regions", "separators", "noise"}
    assert without_blockwise([FINDINGS[name] for name in blockwise_findings()]) == []
    assert without_blockwise([FINDINGS[name] for name in ("csm", "rollout", "attention_maps", "induction")]) == ["rollout", "attention_maps", "induction"]
    text = ModelInfo("x", "x", "llama", 4, 8, 32, 256, 8192, architecture_for("llama"), SimpleNamespace(model_type="llama"))
    assert choose_capture_path("auto", 4096, 512, text, True, without_blockwise=["induction"]) == "dense"
    with pytest.raises(ConfigError, match=r"capture.path=blockwise: the finding\(s\) rollout have no blockwise form"):
        choose_capture_path("blockwise", 64, 512, text, True, without_blockwise=["rollout"])
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    for experiment in ("rollout", "attention_maps", "induction"):
        with pytest.raises(ConfigError, match=f"the finding\\(s\\) {experiment} have no blockwise form"):
            run(
                experiment,
                [f"model.path={tiny_bert}", "corpus.limit=2", "corpus.seq_len=48", "corpus.repeat_length=10", "capture.path=blockwise", f"tracking.uri={uri}"]
                if experiment == "induction"
                else [f"model.path={tiny_bert}", "corpus.limit=2", "corpus.seq_len=48", "capture.path=blockwise", f"tracking.uri={uri}"],
            )
    assert not (tmp_path / "mlflow.db").exists()  # refused before the store was opened


def test_blockwise_run_is_tagged_with_its_path(tiny_bert, tracking_uri):
    """An end-to-end `attnsim run` on the blockwise path: FINISHED, tagged attnsim.capture_path=blockwise and the
    recording SDPA implementation; its CSM mean equals the dense run's."""
    import mlflow

    from attnsim.workflows.run import run

    common = [f"model.path={tiny_bert}", "corpus.limit=2", "corpus.seq_len=48", f"tracking.uri={tracking_uri}", "plots.examples=0"]
    blocks = run("csm", common + ["capture.path=blockwise", "findings=[csm,separators]"])
    dense = run("csm", common + ["capture.path=dense", "findings=[csm,separators]"])
    client = mlflow.MlflowClient(tracking_uri)
    got, want = client.get_run(blocks.run_id), client.get_run(dense.run_id)
    assert got.data.tags["attnsim.capture_path"] == "blockwise" and want.data.tags["attnsim.capture_path"] == "dense"
    assert got.data.tags["attnsim.attn_implementation"] == "attnsim_sdpa"
    assert got.info.status == "FINISHED"
    for key in ("csm/mean", "separators/attention_entropy"):
        assert got.data.metrics[key] == pytest.approx(want.data.metrics[key], rel=1e-5)


def test_causal_decoder_blockwise_equals_dense():
    """A tiny Llama (rotary, grouped key/value heads, SDPA's own causal rule, no padding): the blockwise view,
    which computes only the columns a causal block can reach, equals the dense view of the same capture."""
    from transformers import AutoModel

    from attnsim.capture.architectures import architecture_for
    from attnsim.capture.hooks import BatchCapture, forward_with_capture
    from attnsim.findings.base import view_factory
    from tests.helpers.findings import batch_of
    from tests.helpers.tiny_models import tiny_config

    torch.manual_seed(0)
    config = tiny_config("llama", 60, layers=2, heads=4, hidden=32, initializer_range=0.3)
    model = AutoModel.from_config(config, attn_implementation=register()).eval()
    seq_len = 70
    ids = torch.randint(3, 60, (2, seq_len), generator=torch.Generator().manual_seed(1))
    sentences = (torch.arange(seq_len) // 9).expand(2, -1).clone()
    batch = batch_of(ids, sentences, specials=())
    with torch.no_grad():
        capture = forward_with_capture(
            model, architecture_for("llama"), 4, {"input_ids": ids, "attention_mask": batch["attention_mask"]}, attention=False, queries=True
        )[1]
    assert all(qk.causal and qk.mask is None for qk in capture.query_keys)
    maps = tuple(attention_rows(qk, 0, seq_len) for qk in capture.query_keys)
    results = []
    for path, raw in (("dense", BatchCapture(capture.z_layers, maps, "z")), ("blockwise", BatchCapture(capture.z_layers, None, "z", capture.query_keys))):
        findings, stats = blockwise_finding_objects(seq_len, _VocabTokenizer())
        view = view_factory(findings, stats, path, block_rows=24)(raw, batch)
        for finding in findings:
            finding.update(view)
            assert finding.error is None, (path, finding.name, finding.error)
        results.append((findings, view))
    (dense, dense_view), (blocks, block_view) = results
    assert torch.equal(dense_view.high_index, block_view.high_index.long())
    assert torch.equal(dense_view.attention_index, block_view.attention_index.long())
    for a, b in zip(dense, blocks):
        for key, acc in a.accumulators.items():
            got = b.accumulators[key].compute()
            for name, value in acc.compute().items():
                if value.is_floating_point():
                    scale = value.abs().nan_to_num(0).max().clamp_min(1e-30)
                    torch.testing.assert_close(got[name].double(), value.double(), rtol=1e-5, atol=1e-6 * float(scale), equal_nan=True, msg=f"{a.name}/{name}")
                else:
                    assert torch.equal(got[name], value), (a.name, name)


class _VocabTokenizer:
    """The least a finding context needs from a tokenizer here: ids for the separator categories, a vocabulary size."""

    all_special_tokens = []
    cls_token = sep_token = None

    def __len__(self) -> int:
        return 200

    def convert_tokens_to_ids(self, token):  # noqa: ANN001
        return 199

    def encode(self, text, add_special_tokens=False):  # noqa: ANN001
        return [198]

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=False):  # noqa: ANN001
        # one token, id 198, over the whole text: a separator only where the text is the mark itself
        out = {"input_ids": [198]}
        if return_offsets_mapping:
            out["offset_mapping"] = [(0, len(text))]
        return out
