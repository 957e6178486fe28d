"""The streamed capture path: each layer's eager attention maps folded into the statistics during the forward pass
(:mod:`attnsim.capture.streaming`, :class:`~attnsim.stats.pairs.streamed.StreamedPairView`). Every `paper` statistic
equals the dense path's bit for bit (the same eager maps, the same pieces in the same order), on an encoder and on a
grouped-query decoder; no layer's maps outlive its fold; the path's refusals."""

from __future__ import annotations

import gc
import weakref
from types import SimpleNamespace

import pytest
import torch

from attnsim.capture.load import choose_capture_path
from attnsim.config import load_config
from attnsim.data.module import collate_windows
from attnsim.errors import ConfigError, ModelError
from attnsim.stats.pairs.streamed import StreamedPairView, StreamedViews
from attnsim.workflows.kinds.base import plain_module
from attnsim.workflows.run import build_findings, prepare
from tests.helpers.tiny_models import save_tiny


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("llama"), "llama", heads=4)  # 2 key/value heads: grouped-query attention


def _measure(model_path, path: str, seq_len: int, windows: int = 6, batch: int = 4, autocast: bool = False):
    """Every `paper` finding over ``windows`` BBC windows (the last batch shorter) on capture ``path``: findings, tags, views.
    ``autocast``: each predict step runs under bfloat16 CPU autocast, as Lightning runs it with trainer.precision=bf16-mixed
    (the findings' updates outside it, as its callbacks run)."""
    cfg = load_config(
        "paper", [f"model.path={model_path}", f"corpus.seq_len={seq_len}", f"corpus.limit={windows}", f"trainer.batch_size={batch}", f"capture.path={path}"]
    )
    prepared = prepare(cfg)
    findings = build_findings(prepared)
    module, tags, _ = plain_module(prepared, findings)
    corpus = prepared.corpus.windows
    views = []
    with torch.inference_mode():
        for start in range(0, len(corpus), batch):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                view = module.predict_step(collate_windows(list(enumerate(corpus[start : start + batch]))), start // batch)
            for finding in findings:
                finding.update(view)
                assert finding.error is None, (finding.name, finding.error)
            views.append(view)
    return findings, tags, views


def _assert_same_states(dense, streamed) -> int:
    compared = 0
    for a, b in zip(dense, streamed):
        for key, accumulator in a.accumulators.items():
            for name in accumulator._defaults:
                assert torch.equal(getattr(accumulator, name), getattr(b.accumulators[key], name)), (a.name, key, name)
                compared += 1
    return compared


@pytest.mark.parametrize("chunk_windows", [None, 3])
@pytest.mark.parametrize("model", ["tiny_bert", "tiny_llama"])
def test_streamed_statistics_equal_the_dense_paths_bit_for_bit(model, chunk_windows, request, monkeypatch):
    """Tiny BERT (T = 64) and a tiny Llama with grouped-query attention (T = 48), 6 windows in batches of 4 and 2:
    every sum state of every `paper` finding is equal (torch.equal) on the dense and the streamed path, and the
    auto path of such a run is the streamed one. ``chunk_windows`` 3: the CPU chunk holds 3 windows' maps of a layer,
    so the streamed path runs eager attention on windows 0-2 and 3 of each batch of 4 (and on 0-1 of the last) and
    folds each chunk as it is computed; the model's outputs, and so the heads' vectors, stay those of one call."""
    path = request.getfixturevalue(model)
    seq_len = 64 if model == "tiny_bert" else 48
    if chunk_windows:
        import attnsim.stats.pairs.view as view_module

        monkeypatch.setattr(view_module, "CHUNK_ELEMENTS_CPU", chunk_windows * 4 * seq_len * seq_len)  # 4 (query) heads
    dense, dense_tags, _ = _measure(path, "dense", seq_len)
    streamed, tags, views = _measure(path, "auto", seq_len)
    if chunk_windows:
        assert views[0].window_chunks() == [(0, 3), (3, 4)]
    assert dense_tags["attnsim.capture_path"] == "dense" and tags["attnsim.capture_path"] == "streamed"
    assert all(isinstance(view, StreamedPairView) for view in views)
    assert _assert_same_states(dense, streamed) >= 60


def test_mixed_precision_statistics_equal_the_dense_paths(tiny_bert):
    """Under bfloat16 autocast (trainer.precision=bf16-mixed) the forward pass, and with it the streamed fold, runs in
    autocast; the fold turns it off, so the statistics are the dense path's (computed after the forward pass) bit for bit."""
    dense, _, _ = _measure(tiny_bert, "dense", 64, autocast=True)
    streamed, _, _ = _measure(tiny_bert, "streamed", 64, autocast=True)
    assert _assert_same_states(dense, streamed) >= 60


def test_no_layer_s_maps_outlive_its_fold(tiny_bert):
    """When layer n's maps arrive, layer n-1's are gone (only the first window's copy is kept, for the example
    figures), and the model returned none: at most one layer's (batch, head, T, T) maps are alive at a time."""
    cfg = load_config("paper", [f"model.path={tiny_bert}", "corpus.seq_len=32", "corpus.limit=4", "trainer.batch_size=4", "plots.examples=1"])
    prepared = prepare(cfg)
    findings = build_findings(prepared)
    module, tags, _ = plain_module(prepared, findings)
    assert tags["attnsim.capture_path"] == "streamed"
    alive = []
    fold = StreamedPairView.fold

    def watched(self, maps, start=0):
        gc.collect()
        alive.append([ref() is not None for ref in self.__dict__.setdefault("_refs", [])])
        self._refs.append(weakref.ref(maps))
        fold(self, maps, start)

    batch = collate_windows(list(enumerate(prepared.corpus.windows)))
    with pytest.MonkeyPatch.context() as patch, torch.inference_mode():
        patch.setattr(StreamedPairView, "fold", watched)
        view = module.predict_step(batch, 0)
    assert alive == [[], [False]]  # 2 layers: the first layer's maps were freed before the second's fold
    assert view.capture.attention is None
    kept = view.attention_windows(1)  # (1, L, H, T, T): the first window's maps, rows summing to 1
    assert kept.shape == (1, 2, 4, 32, 32)
    torch.testing.assert_close(kept.sum(-1), torch.ones(1, 2, 4, 32))
    with pytest.raises(ValueError, match="capture.path=dense"):
        view.attention_windows(2)
    with pytest.raises(ValueError, match="capture.path=dense"):
        view.attention  # noqa: B018 - the property raises


def test_the_fold_refuses_a_map_of_another_shape_and_too_few_layers():
    batch = {
        "input_ids": torch.arange(8).view(1, 8),
        "attention_mask": torch.ones(1, 8, dtype=torch.long),
        "special_mask": torch.zeros(1, 8, dtype=torch.bool),
        "sentence_ids": torch.zeros(1, 8, dtype=torch.long),
    }
    view = StreamedPairView(batch, 2, 3)
    with pytest.raises(ModelError, match=r"shape \(1, 2, 8, 8\).*\(c, 3, 8, 8\).*capture.path=dense"):
        view.fold(torch.full((1, 2, 8, 8), 1 / 8))
    with pytest.raises(ModelError, match=r"windows 1..1 .*windows 0 onwards"):  # a window past the batch
        view.fold(torch.full((1, 3, 8, 8), 1 / 8), 1)
    view.fold(torch.full((1, 3, 8, 8), 1 / 8))
    with pytest.raises(ModelError, match="1 attention calls, but the model has 2 layers"):
        view.attach(SimpleNamespace(vectors=[torch.zeros(1, 3, 8, 4)] * 2))


def test_capture_paths_chosen_and_refused(caplog):
    """auto: streamed for text windows whose findings read attention and have a blockwise form; dense with a
    finding that reads whole maps (rollout), for images and without attention; streamed asked for such a run is refused,
    and asked for a run without attention runs dense with a warning that says so."""
    text = SimpleNamespace(arch=SimpleNamespace(vision=False), config=SimpleNamespace())
    image = SimpleNamespace(arch=SimpleNamespace(vision=True), config=SimpleNamespace())
    assert choose_capture_path("auto", 128, 512, text, True) == "streamed"
    assert choose_capture_path("auto", 128, 512, text, False) == "dense"
    with caplog.at_level("WARNING", logger="attnsim.capture.load"):
        assert choose_capture_path("streamed", 128, 512, text, False) == "dense"  # nothing to stream: tagged as what runs
    assert "nothing to stream; the dense path runs" in caplog.text
    assert choose_capture_path("auto", 128, 512, text, True, without_blockwise=["rollout"]) == "dense"
    assert choose_capture_path("auto", 128, 512, image, True) == "dense"
    assert choose_capture_path("auto", 1024, 512, text, True) == "blockwise"
    with pytest.raises(ConfigError, match="rollout.*capture.path=dense or auto"):
        choose_capture_path("streamed", 128, 512, text, True, without_blockwise=["rollout"])
    with pytest.raises(ConfigError, match="images"):
        choose_capture_path("streamed", 128, 512, image, True)


def test_a_model_family_without_an_eager_function_is_refused():
    from attnsim.capture.streaming import model_eager_attention

    with pytest.raises(ModelError, match="eager_attention_forward.*capture.path=dense"):
        model_eager_attention(torch.nn.Linear(2, 2))


def test_the_capture_module_refuses_streaming_without_a_streaming_factory():
    from attnsim.capture.module import CaptureModule

    info = SimpleNamespace(arch=SimpleNamespace(vision=False), n_layers=1, n_heads=1)
    with pytest.raises(ValueError, match="StreamedViews"):
        CaptureModule(torch.nn.Linear(1, 1), info, True, "z", lambda capture, batch: None, capture_path="streamed")
    assert CaptureModule(torch.nn.Linear(1, 1), info, True, "z", StreamedViews(), capture_path="streamed").capture_path == "streamed"


def test_dense_memory_of_the_streamed_path_is_one_layer():
    from attnsim.capture.load import dense_memory

    info = SimpleNamespace(n_layers=30, n_heads=9, d_head=64)
    one = 16 * 9 * 128 * 128 * 4
    assert dense_memory(info, 128, 16) > 33 * one  # every layer's maps, their scores and the statistics' tables beside them
    assert dense_memory(info, 128, 16, streamed=True) == 2 * one


def test_the_factory_keeps_the_maps_of_a_run_s_first_example_windows_only():
    """plots.examples = 3 in batches of 2: the first view keeps 2 windows' maps, the second 1, the third none;
    a new predict run (reset) keeps them again; a kept window's maps are those folded."""
    batch = {
        "input_ids": torch.arange(16).view(2, 8),
        "attention_mask": torch.ones(2, 8, dtype=torch.long),
        "special_mask": torch.zeros(2, 8, dtype=torch.bool),
        "sentence_ids": torch.zeros(2, 8, dtype=torch.long),
    }
    views = StreamedViews(keep=3)
    assert [views.open(batch, 1, 2).keep for _ in range(3)] == [2, 1, 0]
    views.reset()
    view = views.open(batch, 1, 2)
    maps = torch.softmax(torch.randn(2, 2, 8, 8), -1)
    view.fold(maps)
    view.attach(SimpleNamespace(vectors=[torch.randn(2, 2, 8, 4)]))
    assert torch.equal(view.attention_windows(2), maps[:, None])  # (2, L=1, H, T, T)


def test_a_requested_attention_implementation_is_switched_and_tagged_not_dropped(tiny_bert, caplog):
    """model.attn_implementation=sdpa with paper: the streamed path runs eager attention, says so and tags the switch,
    as the dense path does."""
    cfg = load_config("paper", [f"model.path={tiny_bert}", "corpus.seq_len=32", "corpus.limit=2", "model.attn_implementation=sdpa"])
    prepared = prepare(cfg)
    with caplog.at_level("WARNING"):
        _, tags, model = plain_module(prepared, build_findings(prepared))
    assert tags["attnsim.capture_path"] == "streamed" and tags["attnsim.attn_implementation"] == "attnsim_eager"
    assert tags["attnsim.attn_implementation_switched"] == "sdpa->eager"
    assert "switching attn_implementation sdpa -> eager" in caplog.text


def test_a_layer_folded_in_chunks_keeps_its_windows_in_order(monkeypatch):
    """With 3 windows' maps per CPU chunk, a batch of 4 takes each layer as windows 0-2 then 3; a chunk off those
    boundaries, or out of order, is refused; the kept example maps are the windows' own."""
    import attnsim.stats.pairs.view as view_module

    monkeypatch.setattr(view_module, "CHUNK_ELEMENTS_CPU", 3 * 2 * 8 * 8)
    batch = {
        "input_ids": torch.arange(32).view(4, 8),
        "attention_mask": torch.ones(4, 8, dtype=torch.long),
        "special_mask": torch.zeros(4, 8, dtype=torch.bool),
        "sentence_ids": torch.zeros(4, 8, dtype=torch.long),
    }
    view = StreamedPairView(batch, 1, 2, keep=4)
    assert view.window_chunks() == [(0, 3), (3, 4)]
    maps = torch.softmax(torch.randn(4, 2, 8, 8), -1)
    with pytest.raises(ModelError, match="windows 0..1 "):  # not a chunk's boundary
        view.fold(maps[:2], 0)
    with pytest.raises(ModelError, match="windows 3..3 .*windows 0 onwards"):  # the second chunk first
        view.fold(maps[3:], 3)
    view.fold(maps[:3], 0)
    with pytest.raises(ModelError, match=r"0 attention calls and windows 0..2 of the next, but the model has 1 layers"):  # the layer is not complete
        view.attach(SimpleNamespace(vectors=[torch.randn(4, 2, 8, 4)]))
    view.fold(maps[3:], 3)
    view.attach(SimpleNamespace(vectors=[torch.randn(4, 2, 8, 4)]))
    assert torch.equal(view.attention_windows(4), maps[:, None])


def test_an_intervention_beside_other_findings_is_refused_for_that_before_its_capture_path():
    """ablation with other findings and capture.path=streamed: the first error names what is wrong with the run (an
    intervention cannot share it), not the capture path, whose fix would lead to that error next."""
    cfg = load_config("ablation", ["findings=[ablation,distance,separators]", "capture.path=streamed"])
    with pytest.raises(ConfigError, match="cannot share a run with other findings"):
        prepare(cfg)
