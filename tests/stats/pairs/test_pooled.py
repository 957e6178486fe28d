"""Example figures and the explorer at length: on the blockwise path above 512 tokens the
example windows' CSM and attention are recorded already pooled by the figures' rule, block by block, and draw
exactly as the dense path's pooled maps (README, "Long contexts")."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch

from attnsim.capture.hooks import BatchCapture
from attnsim.findings.base import view_factory
from attnsim.findings.examples import ExampleRecorder
from attnsim.stats.pairs.blocks import BlockPairView
from attnsim.stats.pairs.scores import attention_rows
from tests.helpers.blockwise import bert_pair, blockwise_finding_objects, capture_batch, windows_batch

SEQ_LEN, MAX_TOKENS, BLOCK_ROWS = 256, 64, 96


def _payload(page: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" id="explorer-data">(.*?)</script>', page, re.S).group(1))


def _record(view, batch, tok, max_tokens):  # noqa: ANN001
    recorder = ExampleRecorder(3, tok, max_tokens)
    recorder.on_predict_batch_end(None, None, view, batch, 0)
    return recorder.examples


@pytest.fixture(scope="module")
def both_paths(tokenizer):  # noqa: F811
    """The examples recorded from the dense view (T x T maps) and from the blockwise view of one capture
    (3 BBC windows at T = 256, the last one padded), the blockwise view made to pool as above 512 tokens."""
    _, recorded = bert_pair(len(tokenizer))
    batch = windows_batch(tokenizer, SEQ_LEN, 3)
    capture = capture_batch(recorded, batch, "blockwise")
    maps = tuple(attention_rows(qk, 0, SEQ_LEN) for qk in capture.query_keys)
    out = {}
    for path, raw in (("dense", BatchCapture(capture.z_layers, maps, "z")), ("blockwise", BatchCapture(capture.z_layers, None, "z", capture.query_keys))):
        findings, stats = blockwise_finding_objects(SEQ_LEN, tokenizer)
        out[path] = view_factory(findings, stats, path, block_rows=BLOCK_ROWS)(raw, batch)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(BlockPairView, "draws_examples", property(lambda self: False))  # as above 512 tokens
        pooled = _record(out["blockwise"], batch, tokenizer, MAX_TOKENS)
    return _record(out["dense"], batch, tokenizer, MAX_TOKENS), pooled, out["blockwise"]


def test_blockwise_examples_are_pooled_maps_equal_to_the_dense_paths(both_paths):
    """Per example and kind (CSM, attention): the same pooled (layer, head, c, c) maps within 1e-6 (relative to
    the map's scale), the same tokens per cell (ceil(n / 64): 4 for the full windows, 1 for the padded one
    of at most 64 real positions), and the blockwise record holds nothing larger than (layer, E, head, 64, 64)."""
    dense, pooled = both_paths[:2]
    assert not dense.blocks and pooled.csm.shape[-2:] == (MAX_TOKENS, MAX_TOKENS) and pooled.attention.shape[-2:] == (MAX_TOKENS, MAX_TOKENS)
    lengths = [dense.real_length(e) for e in range(3)]
    assert lengths[0] == SEQ_LEN and 2 <= lengths[2] <= MAX_TOKENS  # the last window padded: short enough to stay unpooled
    assert pooled.blocks == [math.ceil(n / MAX_TOKENS) for n in lengths] == [4, 4, 1]
    for e in range(3):
        for kind in ("csm", "attention"):
            want, want_block, want_n = dense.maps(kind, e, MAX_TOKENS)
            got, got_block, got_n = pooled.maps(kind, e, MAX_TOKENS)
            assert (got_block, got_n, got.shape) == (want_block, want_n, want.shape)
            assert want.shape[-1] == math.ceil(want_n / want_block) <= MAX_TOKENS
            scale = float(np.nanmax(np.abs(want)))
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * scale)
        # the stored NaN margin beyond the window's cells
        cells = math.ceil(lengths[e] / pooled.blocks[e])
        assert torch.isnan(pooled.csm[:, e, :, cells:]).all() and torch.isnan(pooled.csm[:, e, :, :, cells:]).all()


def test_pooling_by_hand_of_one_map():
    """The pooled cells are means of their block x block entries, computed from row blocks that do not align
    with the cells (rows 0..4, 5..6 into cells of 3): by hand, a 7 x 7 map of n = 7 real positions -> 3 x 3."""
    from attnsim.stats.pairs.pooled import _PooledSums

    full = torch.arange(49, dtype=torch.float32).reshape(1, 7, 7)
    full[0, 1, 1] = float("nan")  # an undefined entry is left out of its cell's mean
    sums = _PooledSums(1, 7, 3, torch.device("cpu"))
    sums.add(full[:, :5], 0)
    sums.add(full[:, 5:], 5)
    got = sums.mean()[0]
    cell00 = (0 + 1 + 2 + 7 + 9 + 14 + 15 + 16) / 8
    assert got[0, 0].item() == pytest.approx(cell00)
    assert got[0, 2].item() == pytest.approx((6 + 13 + 20) / 3)
    assert got[2, 2].item() == 48.0
    assert got[2, 0].item() == pytest.approx((42 + 43 + 44) / 3)


def test_no_map_larger_than_a_block_of_rows_is_computed(both_paths, monkeypatch):
    """The pooled record computes CSM and attention rows one block (96 rows of 256) at a time."""
    import attnsim.stats.pairs.pooled as pooled_module

    view = both_paths[2]
    shapes = []
    similarity, scores = pooled_module.similarity_rows, pooled_module.masked_scores
    monkeypatch.setattr(
        pooled_module, "similarity_rows", lambda rows, z, normalise: shapes.append(tuple(rows.shape[:-1]) + (z.shape[-2],)) or similarity(rows, z, normalise)
    )
    monkeypatch.setattr(pooled_module, "masked_scores", lambda qk, b, start, stop: shapes.append(("attention", stop - start)) or scores(qk, b, start, stop))
    out = pooled_module.pooled_example_maps(view, 1, MAX_TOKENS)
    assert out["blocks"] == [4] and out["csm"].shape == (2, 1, 4, MAX_TOKENS, MAX_TOKENS)
    assert [s[1] for s in shapes if s[0] != "attention"] == [96, 96, 64, 96, 96, 64]  # rows 0..255 per layer
    assert [s[1] for s in shapes if s[0] == "attention"] == [96, 96, 64, 96, 96, 64]


def test_figures_and_explorer_get_the_same_inputs_on_both_paths(both_paths, monkeypatch):
    """The example CSM and attention figures receive the same (pooled) matrices, tokens per cell, labels and
    sentence boundaries from both records, and the explorer pages embed the same cells, labels and ranges
    and codes (one byte per cell)."""
    import attnsim.plots.csm as csm_plots
    import attnsim.plots.maps as maps_plots
    from attnsim.plots.explorer import explorer_from_examples

    dense, pooled = both_paths[:2]
    seen = []

    def grid(matrices, titles, suptitle, max_tokens, labels=None, boundaries=None, *args, block=None, **kwargs):  # noqa: ANN001
        seen.append((np.asarray(matrices), block, list(labels), list(boundaries or [])))
        return None

    monkeypatch.setattr(csm_plots, "matrix_grid", grid)
    monkeypatch.setattr(maps_plots, "matrix_grid", grid)
    runs = []
    for examples in (dense, pooled):
        seen.clear()
        list(csm_plots.example_csms(examples, MAX_TOKENS))
        list(maps_plots.example_attention(examples, MAX_TOKENS, "attention_maps"))
        runs.append(list(seen))
    assert len(runs[0]) == len(runs[1]) == 3 + 3 * 2  # one CSM figure per window, one attention figure per window and layer
    for (a, block_a, labels_a, starts_a), (b, block_b, labels_b, starts_b) in zip(*runs):
        assert (block_a, labels_a, starts_a) == (block_b, labels_b, starts_b) and block_a in (1, 4)
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6 * float(np.nanmax(np.abs(a))))
    pages = [_payload(explorer_from_examples(examples, MAX_TOKENS, "t")) for examples in (dense, pooled)]
    for want, got in zip(pages[0]["examples"], pages[1]["examples"]):
        assert {k: got[k] for k in ("cells", "block", "labels", "axis", "length", "name")} == {
            k: want[k] for k in ("cells", "block", "labels", "axis", "length", "name")
        }
        assert want["cells"] <= MAX_TOKENS
        for kind in ("csm", "attention"):
            np.testing.assert_allclose(np.array(got[kind]["ranges"]), np.array(want[kind]["ranges"]), rtol=1e-3)
            codes = [np.frombuffer(__import__("base64").b64decode(x[kind]["codes"]), np.uint8).astype(int) for x in (want, got)]
            assert codes[0].shape == codes[1].shape and np.abs(codes[0] - codes[1]).max() <= 1


def test_long_decoder_run_logs_pooled_example_figures_and_explorer(tmp_path, tracking_uri):
    """End to end, a tiny Llama (1,024 positions) at T = 600 > 512: the automatic path is blockwise and logs the
    example CSM and attention_regions figures and explorer.html (CSM and attention) pooled to at most plots.max_tokens = 32 cells per
    axis, whose embedded cells, labels and ranges are the dense run's of the same window."""
    import mlflow

    from attnsim.workflows.run import run
    from tests.helpers.tiny_models import save_tiny

    path = save_tiny(tmp_path / "llama", "llama", positions=1024)
    common = [
        f"model.path={path}",
        "corpus.limit=1",
        "corpus.seq_len=600",
        f"tracking.uri={tracking_uri}",
        "plots.examples=1",
        "plots.max_tokens=32",
        "findings=[csm,separators,attention_regions]",
    ]
    client = mlflow.MlflowClient(tracking_uri)
    pages = []
    for path_option in ("capture.path=auto", "capture.path=dense"):
        result = run("csm", common + [path_option])
        info = client.get_run(result.run_id)
        assert info.info.status == "FINISHED"
        assert info.data.tags["attnsim.capture_path"] == ("blockwise" if path_option.endswith("auto") else "dense")
        artifacts = {a.path for a in client.list_artifacts(result.run_id)} | {
            a.path for folder in ("figures/examples", "figures/attention_regions") for a in client.list_artifacts(result.run_id, folder)
        }
        assert {"explorer.html", "figures/examples/window0_csm.png", "figures/attention_regions/window0.png"} <= artifacts
        folder = tmp_path / path_option.split("=")[1]
        page = _payload(open(client.download_artifacts(result.run_id, "explorer.html", str(folder))).read())
        png = client.download_artifacts(result.run_id, "figures/examples/window0_csm.png", str(folder))
        pages.append((page, __import__("PIL.Image", fromlist=["Image"]).open(png).size))
    (blocks, blocks_png), (dense, dense_png) = pages
    assert blocks_png == dense_png  # the same figure size
    got, want = blocks["examples"][0], dense["examples"][0]
    assert got["cells"] == want["cells"] == math.ceil(got["length"] / got["block"]) <= 32 and got["block"] == math.ceil(got["length"] / 32) >= 2
    assert {k: got[k] for k in ("labels", "axis", "length")} == {k: want[k] for k in ("labels", "axis", "length")}
    for kind in ("csm", "attention"):
        np.testing.assert_allclose(np.array(got[kind]["ranges"]), np.array(want[kind]["ranges"]), rtol=1e-3)
        assert len(got[kind]["codes"]) == len(want[kind]["codes"])


def test_region_figures_outline_the_same_pooled_cells_on_both_paths(both_paths, tokenizer, monkeypatch):  # noqa: F811
    """attention_regions window figures: from the pooled record and the finding's pair indices (no (L, E, H, P)
    masks above 512 tokens), each panel's pooled CSM and outlined cells equal the dense path's (its T x T region
    masks pooled by the figures' rule, a cell outlined when any of its pairs is in the region)."""
    import attnsim.plots.regions as region_plots
    from attnsim.findings.attention_regions import AttentionRegionsFinding

    dense, pooled, block_view = both_paths
    findings = {}
    for path in ("dense", "blockwise"):
        finding = next(f for f in blockwise_finding_objects(SEQ_LEN, tokenizer)[0] if isinstance(f, AttentionRegionsFinding))
        finding.max_examples = 3  # plots.examples (the test's finding context keeps none)
        if path == "blockwise":
            with monkeypatch.context() as patch:
                patch.setattr(BlockPairView, "draws_examples", property(lambda self: False))
                finding.update(block_view)
        else:
            capture_maps = tuple(attention_rows(qk, 0, SEQ_LEN) for qk in block_view.query_keys)
            stats = blockwise_finding_objects(SEQ_LEN, tokenizer)[1]
            finding.update(
                view_factory([finding], stats, "dense", block_rows=BLOCK_ROWS)(BatchCapture(block_view._vector_layers, capture_maps, "z"), block_view.batch)
            )
        findings[path] = finding
    assert findings["dense"].regions.dtype == torch.bool and findings["blockwise"].regions.dtype in (torch.int32, torch.int64)
    assert findings["blockwise"].regions.shape[:3] == (2, 3, 4) and findings["blockwise"].regions.shape[-1] < SEQ_LEN * (SEQ_LEN - 1) // 2
    jaccard = torch.rand(2, 4, generator=torch.Generator().manual_seed(0))
    seen = []
    monkeypatch.setattr(
        region_plots,
        "matrix_grid",
        lambda matrices, titles, suptitle, max_tokens, labels, starts, outlines, cols, block=None: seen.append((matrices, outlines, block)),
    )
    runs = []
    for path, examples in (("dense", dense), ("blockwise", pooled)):
        seen.clear()
        list(region_plots.example_regions(examples, findings[path].regions, jaccard, 0.02, MAX_TOKENS))
        runs.append(list(seen))
    assert len(runs[0]) == len(runs[1]) == 3
    from attnsim.plots.common import pool_matrix

    for (full, full_outlines, none), (cells, cell_outlines, block) in zip(*runs):
        assert none is None and block in (1, 4)
        want, _ = pool_matrix(full, MAX_TOKENS)
        np.testing.assert_allclose(cells, want, rtol=1e-6, atol=1e-6 * float(np.nanmax(np.abs(want))))
        outline_want = np.nan_to_num(pool_matrix(full_outlines.astype(float), MAX_TOKENS)[0]) > 0
        assert cell_outlines.shape == outline_want.shape and (cell_outlines == outline_want).all() and outline_want.any()
