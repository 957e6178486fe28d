"""The compiled top-k kernel (attnsim/stats/pairs/kernels.py) and the float32 CSM walk it certifies: the same
high pairs as the fallback path (NumPy partition, float64 CSM), statistics within 1e-6 relative."""

from __future__ import annotations

import warnings

import pytest
import torch

from attnsim.stats.pairs import exact_top, kernels
from attnsim.stats.pairs.geometry import product_error
from tests.helpers.blockwise import blockwise_findings
from tests.helpers.models import BUNDLED

pytestmark = pytest.mark.skipif(not kernels.compiled_available(), reason="numba is not installed")


def _kth_and_next(values: torch.Tensor, k: int):
    ordered = values.sort(-1, descending=True).values
    return ordered[..., k - 1], ordered[..., k]


@pytest.mark.parametrize("n, k", [(8128, 163), (8128, 1), (8125, 162), (1000, 21), (997, 30), (50, 40), (13, 12), (2, 1)])
def test_compiled_top_is_the_exact_rule(n, k):
    generator = torch.Generator().manual_seed(11 * n + k)
    values = torch.randn(3, 4, n, generator=generator)
    values[..., ::3] = float("-inf")  # invalid entries rank last
    values[0, 0] = torch.randint(0, 4, (n,), generator=generator).float()  # ties at the k-th value almost surely
    k = max(1, min(k, int(torch.isfinite(values).sum(-1).min()) - 1))
    index, kth, below = kernels.compiled_top(values, k)
    assert index.shape == (3, 4, k) and index.dtype == torch.long
    assert torch.equal(index, exact_top(values, k).sort(-1).values)  # the same positions, ascending, tie rule included
    want_kth, want_next = _kth_and_next(values, k)
    assert torch.equal(kth, want_kth)
    assert bool((below >= want_next).all())  # an upper bound of the (k+1)-th value
    tied = want_kth == want_next
    assert torch.equal(below[tied], kth[tied])  # no margin where the k-th value ties


def test_compiled_top_when_the_largest_values_miss_the_sample():
    """Every large value sits between the sample's points: fewer than k reach the sample's threshold, and
    every entry becomes a candidate (the exact rule still holds)."""
    n, k = 4096, 80
    values = torch.zeros(2, n)
    positions = torch.arange(n)
    off_sample = positions[positions % kernels.SAMPLE_STRIDE != 0][: 3 * k]
    values[:, off_sample] = torch.linspace(1.0, 2.0, len(off_sample))
    index, kth, _ = kernels.compiled_top(values, k)
    assert torch.equal(index, exact_top(values, k).sort(-1).values)
    assert torch.equal(kth, values.sort(-1, descending=True).values[:, k - 1])


def test_compiled_top_leaves_nan_and_other_inputs_to_the_fallback():
    with_nan = torch.randn(3, 100)
    with_nan[1, 5] = float("nan")
    assert kernels.compiled_top(with_nan, 10) is None
    assert kernels.compiled_top(torch.randn(3, 100, dtype=torch.float64), 10) is None  # float32 only
    assert kernels.compiled_top(torch.randn(3, 100), 0) is None and kernels.compiled_top(torch.randn(3, 100), 100) is None


@pytest.mark.parametrize("symmetric", [True, False])
def test_pair_kernel_reads_whole_matrices_as_the_gathered_rule(symmetric):
    """Pair values formed from whole T x T matrices (upper triangle, or the maximum of both directions),
    invalid pairs last: the exact rule on the gathered values, ties included."""
    from attnsim.stats.pairs import pair_indices

    generator = torch.Generator().manual_seed(5)
    windows, heads, size, k = 3, 7, 40, 16
    matrices = torch.rand(windows, heads, size, size, generator=generator)
    matrices[0, 0] = torch.randint(0, 3, (size, size), generator=generator).float()  # ties
    tokens = torch.ones(windows, size, dtype=torch.bool)
    tokens[1, 30:] = False  # padding
    tokens[2, 0] = False  # a token left out of the statistics
    rows, cols = pair_indices(size)
    values = torch.maximum(matrices[..., rows, cols], matrices[..., cols, rows]) if symmetric else matrices[..., rows, cols]
    valid = (tokens[:, rows] & tokens[:, cols])[:, None, :]
    want = exact_top(values.masked_fill(~valid, float("-inf")), k).sort(-1).values
    got = kernels.compiled_pair_top(matrices, tokens, [k] * windows, symmetric)
    assert got.shape == (windows, heads, k) and torch.equal(got, want)
    with_nan = matrices.clone()
    with_nan[1, 2, 3, 5] = float("nan")  # a valid pair's value
    assert kernels.compiled_pair_top(with_nan, tokens, [k] * windows, symmetric) is None
    with_nan[1, 2, 3, 5], with_nan[1, 2, 35, 36] = matrices[1, 2, 3, 5], float("nan")  # an invalid pair's NaN ranks last
    assert torch.equal(kernels.compiled_pair_top(with_nan, tokens, [k] * windows, symmetric), want)
    # a k per window, the unused slots holding the sentinel P; a window without pairs (k = 0)
    counts = [k, 5, 0]
    got = kernels.compiled_pair_top(matrices, tokens, counts, symmetric)
    n = size * (size - 1) // 2
    assert got.shape == (windows, heads, k) and torch.equal(got[0], want[0]) and bool((got[2] == n).all())
    assert torch.equal(got[1, :, :5], exact_top(values[1].masked_fill(~valid[1], float("-inf")), 5).sort(-1).values) and bool((got[1, :, 5:] == n).all())


def test_csm_walk_kernel_computes_chooses_and_sums_in_one_pass():
    """The CSM walk's kernel against a float64 recomputation: pair values within the float32 error bound (0 at invalid
    pairs), that bound as product_error gives it; the float64 CSM's high pairs (invalid pairs at -inf; ties; a k per
    window; k = 0), as compiled_top chooses them from the float32 values where the margin allows, else chosen again
    (ties, or every row with an infinite margin); the class sums and squares in float64, the totals added window after
    window; a NaN row left unchosen; k out of range, float64 and another class count declined."""
    from attnsim.stats.pairs import pair_indices

    generator = torch.Generator().manual_seed(7)
    windows, layers, heads, size, d = 3, 2, 5, 40, 6
    vectors = torch.randn(windows, layers, heads, size, d, generator=generator)
    vectors[0, 1, 2] = torch.randint(0, 2, (size, d), generator=generator).float()  # integer products: ties at the k-th value
    tokens = torch.ones(windows, size, dtype=torch.bool)
    tokens[1, 25:] = False  # padding
    tokens[2, [0, 7]] = False  # tokens left out of the statistics
    rows, cols = pair_indices(size)
    n = len(rows)
    valid = (tokens[:, rows] & tokens[:, cols])[:, None, None, :]  # (windows, 1, 1, P)
    weights = (torch.rand(windows, 5, n, generator=generator) < 0.4).float()
    exact = (vectors.double() @ vectors.double().transpose(-1, -2))[..., rows, cols]  # (W, L, H, P) float64
    start = torch.randn(layers, heads, n, generator=generator)
    totals = start.clone()
    counts = [16, 5, 9]
    walked = kernels.compiled_csm_walk(vectors, tokens, counts, weights, totals)
    assert walked.pairs.shape == (windows, layers, heads, n) and walked.index.shape == (windows, layers, heads, 16)
    torch.testing.assert_close(walked.error, product_error(vectors), rtol=1e-6, atol=0)
    assert bool(((walked.pairs.double() - exact.masked_fill(~valid, 0)).abs() <= walked.error[..., None].double()).all())
    assert bool((walked.pairs.masked_select(~valid.expand_as(walked.pairs)) == 0).all())
    values = walked.pairs.masked_fill(~valid, float("-inf"))
    wide = exact.float().masked_fill(~valid, float("-inf"))  # float64 products rounded once: the fallback's values
    for window, k in enumerate(counts):
        want_index, want_kth, want_below = kernels.compiled_top(values[window], k)
        assert torch.equal(walked.kth[window], want_kth) and torch.equal(walked.below[window], want_below)
        # the float64 CSM's high pairs in every row: the float32 choice where it stands, else chosen again
        assert torch.equal(walked.index[window, ..., :k], exact_top(wide[window], k).sort(-1).values) and bool((walked.index[window, ..., k:] == n).all())
        stands = walked.status[window] == kernels.CERTIFIED
        assert torch.equal(walked.index[window, ..., :k][stands], want_index[stands])
        assert torch.equal(stands, (want_kth.double() - want_below.double()) > 2 * walked.error[window].double())
    assert int(walked.status[0, 1, 2]) == kernels.RECHOSEN  # tied at the k-th value: no margin
    assert set(walked.status.flatten().tolist()) == {kernels.CERTIFIED, kernels.RECHOSEN}
    every = kernels.compiled_csm_walk(vectors, tokens, counts, weights, margins=[float("inf")] * windows)  # every row again
    assert bool((every.status == kernels.RECHOSEN).all()) and torch.equal(every.index, walked.index)
    flat = walked.pairs.double().reshape(windows, layers * heads, n)
    torch.testing.assert_close(walked.class_sums, torch.einsum("wrp,wcp->wrc", flat, weights.double()), rtol=1e-12, atol=1e-9)
    valid = weights[:, None, 0].double()  # (W, 1, P): row 0 of the weights, the valid pairs
    mean = (walked.pairs.double().reshape(windows, layers * heads, n) * valid).sum(-1) / valid.sum(-1)
    deviation = (walked.pairs.double().reshape(windows, layers * heads, n) - mean[..., None]) * valid
    torch.testing.assert_close(walked.squares, (deviation**2).sum(-1).view(windows, layers, heads), rtol=1e-12, atol=1e-9)
    want_totals = start.clone()
    for window in range(windows):  # float32, window after window, as the fallback's `by_pair += chunk.sum(0)` per window
        want_totals += walked.pairs[window]
    assert torch.equal(totals, want_totals)
    # a window without pairs chooses none: every slot the sentinel, and a margin no error can close
    walked = kernels.compiled_csm_walk(vectors, tokens, [16, 0, 9], weights)
    assert bool((walked.index[1] == n).all()) and bool((walked.kth[1] == float("inf")).all()) and bool((walked.below[1] == float("-inf")).all())
    with_nan = vectors.clone()
    with_nan[2, 1, 3, 5, 0] = float("nan")
    walked = kernels.compiled_csm_walk(with_nan, tokens, counts, weights)
    assert bool(walked.kth[2, 1, 3].isnan()) and bool(walked.below[2, 1, 3].isnan()) and bool((walked.index[2, 1, 3] == n).all())
    assert int(walked.status[2, 1, 3]) == kernels.UNCHOSEN and int((walked.status == kernels.UNCHOSEN).sum()) == 1  # left to the caller
    assert kernels.compiled_csm_walk(vectors, tokens, [16, n, 9], weights) is None  # k out of range
    assert kernels.compiled_csm_walk(vectors.double(), tokens, counts, weights) is None  # float32 only
    assert kernels.compiled_csm_walk(vectors, tokens, counts, weights[:, :3]) is None  # the 5 pair classes only


def test_disabled_by_the_environment(monkeypatch):
    monkeypatch.setenv(kernels.DISABLE_ENV, "0")
    assert not kernels.compiled_available() and kernels.path_name() == "fallback"
    assert kernels.compiled_top(torch.randn(2, 50), 3) is None


@pytest.mark.parametrize("value, compiled", [("0", False), ("false", False), ("Off", False), ("no", False), ("1", True), ("true", True), ("", True)])
def test_the_environment_switch_reads_the_usual_spellings(monkeypatch, value, compiled):
    monkeypatch.setenv(kernels.DISABLE_ENV, value)
    assert kernels.requested() is compiled and kernels.compiled_available() is compiled


def test_an_unknown_switch_value_is_refused_before_the_model_loads(monkeypatch):
    from attnsim.config import load_config
    from attnsim.errors import ConfigError
    from attnsim.workflows.run import prepare

    monkeypatch.setenv(kernels.DISABLE_ENV, "abc")
    with pytest.raises(ValueError, match="ATTNSIM_COMPILED is 'abc'; use 0"):
        kernels.requested()
    with pytest.raises(ConfigError, match="ATTNSIM_COMPILED is 'abc'; use 0 .* or 1"):
        prepare(load_config("csm", ["corpus.limit=2"]))


def test_disabled_jit_warns_with_its_own_fix(monkeypatch):
    monkeypatch.setattr(kernels, "_state", {"kernel": None, "checked": False, "pool": None, "threads": 0})
    monkeypatch.setattr(kernels, "_build", lambda: None)  # what _build returns under NUMBA_DISABLE_JIT=1
    with pytest.warns(RuntimeWarning, match=r"NUMBA_DISABLE_JIT is set\)\. Fix: unset NUMBA_DISABLE_JIT"):
        assert not kernels.compiled_available()


def test_missing_numba_warns_once_and_falls_back(monkeypatch):
    def missing():
        raise ImportError("No module named 'numba'")

    monkeypatch.setattr(kernels, "_state", {"kernel": None, "checked": False, "pool": None, "threads": 0})
    monkeypatch.setattr(kernels, "_build", missing)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not kernels.compiled_available()
        assert not kernels.compiled_available()
        assert kernels.compiled_top(torch.randn(2, 50), 3) is None
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "pip install numba" in messages[0]


def test_product_error_bounds_the_float32_csm():
    """Every float32 CSM value lies within the bound of the float64 value rounded to float32."""
    generator = torch.Generator().manual_seed(3)
    z = torch.randn(6, 128, 64, generator=generator) * torch.rand(6, 128, 1, generator=generator) * 30
    narrow = z @ z.transpose(-1, -2)
    wide = (z.double() @ z.double().transpose(-1, -2)).float()
    bound = product_error(z)  # (6,)
    assert bool(((narrow - wide).abs().amax((-1, -2)) <= bound).all())
    assert float(bound[0]) == pytest.approx(66 * 2.0**-24 * float(z[0].pow(2).sum(-1).max()))


# -- the two paths on real windows -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm_batch():
    """MiniLM's per-head outputs and attention of 6 BBC windows of 128 tokens (the last one padded)."""
    from transformers import AutoModel, AutoTokenizer

    from attnsim.capture.architectures import architecture_for
    from attnsim.capture.hooks import BatchCapture, forward_with_capture
    from attnsim.data.module import collate_windows
    from attnsim.data.sources import read_documents
    from attnsim.data.windows import build_corpus

    tokenizer = AutoTokenizer.from_pretrained(BUNDLED)
    model = AutoModel.from_pretrained(BUNDLED, attn_implementation="eager").eval()
    corpus = build_corpus(read_documents("bbc")[:12], tokenizer, 128, limit=6, shuffle=False)
    batch = collate_windows(list(enumerate(corpus.windows)), corpus.unk_token_id)
    batch["attention_mask"][-1, 100:] = 0  # a padded window: invalid pairs enter the selection as -inf
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    with torch.no_grad():
        raw = forward_with_capture(model, architecture_for("bert"), model.config.num_attention_heads, inputs, attention=True)[1]
    return tokenizer, batch, BatchCapture(tuple(raw.z_layers), tuple(raw.attention_layers), "z")


def _fold(minilm_batch, monkeypatch, compiled: bool):
    from omegaconf import OmegaConf

    from attnsim.config import StatsConfig
    from attnsim.findings.base import FindingContext, view_factory
    from attnsim.findings.registry import FINDINGS

    monkeypatch.setenv(kernels.DISABLE_ENV, "1" if compiled else "0")
    tokenizer, batch, capture = minilm_batch
    stats = OmegaConf.structured(StatsConfig)
    context = FindingContext(tokenizer=tokenizer, vocab_size=len(tokenizer))
    findings = [FINDINGS[name](6, 12, 128, stats, context) for name in blockwise_findings()]
    view = view_factory(findings, stats)(capture, batch)
    assert view._narrow_csm is compiled  # the dense walk's own machinery
    for finding in findings:
        finding.update(view)
        assert finding.error is None, (finding.name, finding.error)
    return findings, view.high_index.clone(), view.attention_index.clone()


def _compare(a_findings, b_findings, rtol: float):
    compared = 0
    for a, b in zip(a_findings, b_findings):
        for key, acc in a.accumulators.items():
            want, got = acc.compute(), b.accumulators[key].compute()
            for name, value in want.items():
                other = got[name]
                if value.is_floating_point():
                    scale = value.abs().nan_to_num(0).max().clamp_min(1e-30)
                    torch.testing.assert_close(other.double(), value.double(), rtol=rtol, atol=rtol * float(scale), equal_nan=True, msg=f"{a.name}/{name}")
                else:
                    assert torch.equal(other, value), (a.name, name)
                compared += 1
    return compared


def test_compiled_and_fallback_paths_agree(minilm_batch, monkeypatch):
    """The same high-CSM and high-attention pairs, every `paper` statistic within 1e-6 relative."""
    fallback, fallback_high, fallback_attention = _fold(minilm_batch, monkeypatch, compiled=False)
    compiled, compiled_high, compiled_attention = _fold(minilm_batch, monkeypatch, compiled=True)
    assert torch.equal(compiled_high, fallback_high)
    assert torch.equal(compiled_attention, fallback_attention)
    assert _compare(fallback, compiled, 1e-6) >= 57


def _with_margins(walk, margins):
    """``compiled_csm_walk`` with the certification margins ``margins(windows)`` (a list, one per window of the chunk),
    recording each call's row statuses in ``calls``."""
    calls = []

    def changed(vectors, *args, **kwargs):
        walked = walk(vectors, *args, margins=margins(vectors.shape[0]), **kwargs)
        calls.append(walked.status)
        return walked

    return changed, calls


def test_rows_without_a_certified_margin_are_chosen_from_the_float64_csm(minilm_batch, monkeypatch):
    """With a margin no gap can exceed, the kernel chooses every row again from float64 products: still the fallback's
    pairs. Ties (two identical heads' vectors duplicated within a window) too. A row holding NaN, which the kernel
    leaves unchosen, is chosen by the view as on the fallback path."""
    from attnsim.stats.pairs import view as view_module

    tokenizer, batch, capture = minilm_batch
    z = [layer.clone() for layer in capture.vectors]
    z[2][:, 3, 60:90] = z[2][:, 3, 20:50]  # repeated vectors: CSM values tie exactly at many pairs
    tied = type(capture)(tuple(z), capture.attention, capture.vector)
    _, want, _ = _fold((tokenizer, batch, tied), monkeypatch, compiled=False)
    _, got, _ = _fold((tokenizer, batch, tied), monkeypatch, compiled=True)
    assert torch.equal(got, want)
    changed, calls = _with_margins(view_module.compiled_csm_walk, lambda windows: [float("inf")] * windows)
    monkeypatch.setattr(view_module, "compiled_csm_walk", changed)
    _, got, _ = _fold((tokenizer, batch, tied), monkeypatch, compiled=True)
    assert torch.equal(got, want)
    assert sum(int((status == kernels.RECHOSEN).sum()) for status in calls) == 6 * 6 * 12  # every (window, layer, head) row again
    monkeypatch.undo()
    z[4][1, 7, 30, 0] = float("nan")  # window 1, layer 4, head 7: a NaN product in 127 pairs
    with_nan = type(capture)(tuple(z), capture.attention, capture.vector)
    _, want, _ = _fold((tokenizer, batch, with_nan), monkeypatch, compiled=False)
    changed, calls = _with_margins(view_module.compiled_csm_walk, lambda windows: [kernels.CERTIFY_MARGIN] * windows)
    monkeypatch.setattr(view_module, "compiled_csm_walk", changed)
    _, got, _ = _fold((tokenizer, batch, with_nan), monkeypatch, compiled=True)
    assert torch.equal(got, want) and sum(int((status == kernels.UNCHOSEN).sum()) for status in calls) == 1


def test_chunks_of_several_windows_with_their_own_k(minilm_batch, monkeypatch):
    """Chunks of several windows (a smaller model's, or a bigger cache's), one of them padded (its own k): the
    fallback's pairs and statistics, also when one window's rows lack a certified margin."""
    from attnsim.stats.pairs import view as view_module

    _, want_high, want_attention = _fold(minilm_batch, monkeypatch, compiled=False)
    want = _fold(minilm_batch, monkeypatch, compiled=False)[0]
    monkeypatch.setattr(view_module, "CHUNK_ELEMENTS_CPU", 3 * 6 * 12 * 128 * 128)  # 3 windows per chunk
    got, got_high, got_attention = _fold(minilm_batch, monkeypatch, compiled=True)
    assert torch.equal(got_high, want_high) and torch.equal(got_attention, want_attention)
    assert _compare(want, got, 1e-6) >= 57
    changed, calls = _with_margins(view_module.compiled_csm_walk, lambda windows: [kernels.CERTIFY_MARGIN] * (windows - 1) + [float("inf")])
    monkeypatch.setattr(view_module, "compiled_csm_walk", changed)  # no margin is enough in each chunk's last window
    _, got_high, _ = _fold(minilm_batch, monkeypatch, compiled=True)
    assert torch.equal(got_high, want_high)
    assert all(bool((status[-1] == kernels.RECHOSEN).all()) for status in calls) and len(calls) == 2
