"""Arithmetic of interventions: task metrics of one forward pass, effects, random baselines, z-scores, restored shares.

Pure functions and one accumulator; no hooks (those are :mod:`attnsim.capture.interventions`), no I/O.

Task metrics (README, "Interventions"), each a sum over items and a count, divided at the end:

- ``accuracy``: share of windows whose argmax class is the window's label (a sequence classifier).
- ``logit_diff``: mean over windows of the label's logit minus the largest other logit (logit units).
- ``mlm_loss``: mean cross-entropy (nats) of the masked-LM head on the masked positions.
- ``lm_loss``: mean cross-entropy (nats) of a causal LM predicting each real token from the ones before it.
- ``repeat_loss`` (in-context loss, Olsson et al. 2022, Sec. 2): ``lm_loss`` over the tokens of the second
  and later copies of a repeated random sequence (``corpus.source=repeated_tokens``: tokens with an earlier
  occurrence), where an induction head can copy the token that followed the earlier occurrence.
- ``first_copy_loss``: ``lm_loss`` over the tokens of the first copy (random tokens, nothing to copy): the
  level the repeated copies are read against.
- ``cosine``: mean over real tokens of the cosine between a pass's final hidden states and the clean run's
  (an encoder without a head); 1 for the clean run itself.
- ``csm_change``: how much an ablation changes the other heads' Context Similarity Matrices (an encoder
  without a head): sum over the heads not ablated, windows and valid pairs i < j of |CSM_ablated - CSM_clean|,
  divided by the sum over all heads, windows and valid pairs of |CSM_clean| (a relative L1 change; unitless;
  0 for the clean run). Heads at or before the set's earliest layer compute what they computed in the clean
  run, so only later layers add to it; a set in the last layer changes nothing (exactly 0). The denominator
  is the same for every pass, so sets and random draws are read on one scale (:func:`csm_change_sums`).

An *effect* is the damage an ablation does to a metric, signed so that positive means "the ablation hurt":
``clean - ablated`` for metrics where higher is better (accuracy, logit difference, cosine) and
``ablated - clean`` for losses. Every effect is read against random head sets of the same size
(:func:`random_baseline`): their mean, their spread (sample standard deviation, ddof = 1) and the z-score
``(effect - mean) / spread``.

Activation patching's *restored share* (Wang et al. 2022; Heimersheim & Nanda 2024):
``(patched - corrupted) / (clean - corrupted)`` of the mean logit differences: 0 when patching changes
nothing, 1 when it brings the clean run's logit difference back.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from attnsim.stats.base import Accumulator, safe_divide
from attnsim.stats.pairs.geometry import context_similarity

METRICS = ("accuracy", "logit_diff", "mlm_loss", "lm_loss", "repeat_loss", "first_copy_loss", "cosine", "csm_change")
"""Every task metric, in the order of the accumulator's metric axis."""

HIGHER_IS_BETTER = {
    "accuracy": True,
    "logit_diff": True,
    "mlm_loss": False,
    "lm_loss": False,
    "repeat_loss": False,
    "first_copy_loss": False,
    "cosine": True,
    "csm_change": False,
}

TASK_METRICS = {
    "classifier": ("accuracy", "logit_diff"),
    "masked_lm": ("mlm_loss",),
    "causal_lm": ("lm_loss",),
    "encoder": ("cosine", "csm_change"),
}
"""The metrics of each kind of model head (:func:`attnsim.capture.interventions.head_kind`)."""

REPEATED_METRICS = ("repeat_loss", "first_copy_loss")
"""A causal LM's extra metrics on repeated random tokens (``corpus.source=repeated_tokens``)."""


def _zeros() -> Tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros(len(METRICS), dtype=torch.float64), torch.zeros(len(METRICS), dtype=torch.float64)


def classification_sums(logits: torch.Tensor, labels: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sums and counts of ``accuracy`` and ``logit_diff`` over a batch.

    Args:
        logits: (batch, classes) classifier logits.
        labels: (batch,) int64 class of each window.

    Returns:
        (sums, counts), each (len(METRICS),) float64; zero outside the two metrics.
    """
    sums, counts = _zeros()
    logits = logits.detach().double()
    correct = (logits.argmax(-1) == labels).double()
    own = logits.gather(1, labels[:, None])[:, 0]
    others = logits.scatter(1, labels[:, None], float("-inf")).amax(-1)
    for name, values in (("accuracy", correct), ("logit_diff", own - others)):
        index = METRICS.index(name)
        sums[index] = values.sum().cpu()
        counts[index] = float(values.numel())
    return sums, counts


def token_loss_sums(logits: torch.Tensor, targets: torch.Tensor, name: str) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sum and count of a token cross-entropy (``mlm_loss`` or ``lm_loss``) over a batch.

    Args:
        logits: (batch, pos, vocab) prediction logits.
        targets: (batch, pos) int64 target token ids, -100 where no token is predicted.
        name: ``mlm_loss`` or ``lm_loss``.

    Returns:
        (sums, counts), each (len(METRICS),) float64: summed cross-entropy in nats and the number of targets.
    """
    sums, counts = _zeros()
    valid = targets != -100
    if valid.any():
        loss = torch.nn.functional.cross_entropy(logits[valid].double(), targets[valid], reduction="sum")
        sums[METRICS.index(name)] = loss.detach().cpu()
    counts[METRICS.index(name)] = float(valid.sum())
    return sums, counts


def copy_targets(targets: torch.Tensor, earlier_position: torch.Tensor, sentence_ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Split next-token targets into the repeated copies' and the first copy's (``repeat_loss``, ``first_copy_loss``).

    Args:
        targets: (batch, pos) int64 from :func:`next_token_targets` (position t predicts token t + 1).
        earlier_position: (batch, pos) int64, each token's earlier occurrence, -1 where none (the batch's key).
        sentence_ids: (batch, pos) int64, the copy each content token belongs to (0 = first), -1 elsewhere.

    Returns:
        (repeated, first): each (batch, pos) int64, -100 where the predicted token t + 1 is not in that part.
    """
    later = torch.zeros_like(targets, dtype=torch.bool)
    first = torch.zeros_like(later)
    later[:, :-1] = earlier_position[:, 1:] >= 0
    first[:, :-1] = sentence_ids[:, 1:] == 0
    return targets.masked_fill(~later, -100), targets.masked_fill(~first, -100)


def next_token_targets(input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """Targets of a causal LM's next-token loss: position t predicts token t + 1 when both are real.

    Args:
        input_ids, attention_mask: (batch, pos) int64.

    Returns:
        (batch, pos) int64, -100 where nothing is predicted (the last position, padding).
    """
    targets = torch.full_like(input_ids, -100)
    both = attention_mask[:, :-1].bool() & attention_mask[:, 1:].bool()
    targets[:, :-1] = input_ids[:, 1:].masked_fill(~both, -100)
    return targets


def masked_positions(special_mask: torch.Tensor, attention_mask: torch.Tensor, index: torch.Tensor, fraction: float, seed: int) -> torch.Tensor:
    """Which tokens a masked-LM metric masks: each real, non-special token with probability ``fraction``.

    The draw of window ``i`` (its corpus position, ``index[b]``) depends only on ``seed`` and ``i``, so the clean
    pass and every ablated pass mask the same tokens, in any batching. A window with no drawn token gets its
    first content token masked.

    Args:
        special_mask, attention_mask: (batch, pos).
        index: (batch,) int64 corpus position of each window.
        fraction: share of content tokens masked, in (0, 1].
        seed: the run's seed.

    Returns:
        (batch, pos) bool.
    """
    content = attention_mask.bool() & ~special_mask.bool()
    out = torch.zeros_like(content)
    for row, position in enumerate(index.tolist()):
        generator = torch.Generator().manual_seed(int(seed) * 1_000_003 + int(position))
        draw = torch.rand(content.shape[1], generator=generator) < fraction
        chosen = draw.to(content.device) & content[row]
        if not chosen.any() and content[row].any():
            chosen[content[row].nonzero()[0, 0]] = True
        out[row] = chosen
    return out


def cosine_sums(hidden: torch.Tensor, clean: torch.Tensor, attention_mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sum and count of the ``cosine`` between a pass's final hidden states and the clean run's, over real tokens.

    Args:
        hidden, clean: (batch, pos, d_model).
        attention_mask: (batch, pos).

    Returns:
        (sums, counts), each (len(METRICS),) float64.
    """
    sums, counts = _zeros()
    real = attention_mask.bool()
    cos = torch.nn.functional.cosine_similarity(hidden.double(), clean.double(), dim=-1)  # (B, T)
    sums[METRICS.index("cosine")] = cos[real].sum().cpu()
    counts[METRICS.index("cosine")] = float(real.sum())
    return sums, counts


def csm_change_sums(
    z: Sequence[torch.Tensor], clean_z: Sequence[torch.Tensor], attention_mask: torch.Tensor, ablated: Sequence[Tuple[int, int]] = (), normalise: str = "none"
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sum and count of ``csm_change``: the other heads' CSM change under an ablation, relative to the clean CSMs.

    Per layer l and head h, CSM = Z Zᵀ over positions with a zero diagonal (:func:`~attnsim.stats.pairs.geometry.context_similarity`,
    as the ``csm`` finding computes it); the pairs are i < j with both tokens real (``attention_mask``).

    - sum: over layers, heads not in ``ablated``, windows and pairs, of |CSM(z) - CSM(clean_z)|;
    - count: over all layers, heads, windows and pairs, of |CSM(clean_z)|.

    Their ratio is 0 for the clean pass. An ablated head's own Z (replaced, or computed from an unchanged
    input) is left out of the sum: the metric reads what the ablation does to the *other* heads.

    Args:
        z: per layer, (batch, head, pos, d_head) Z of the ablated pass (as :func:`~attnsim.capture.hooks.capture_heads` gives it).
        clean_z: the same of the clean pass.
        attention_mask: (batch, pos), 1 for real tokens.
        ablated: the (layer, head) pairs of the set.
        normalise: ``none`` (Z Zᵀ) or ``cosine`` (``stats.normalise``).

    Returns:
        (sums, counts), each (len(METRICS),) float64, in units of the CSM (z² for ``none``).
    """
    sums, counts = _zeros()
    real = attention_mask.bool()
    length = real.shape[1]
    upper = torch.ones(length, length, dtype=torch.bool, device=real.device).triu(1)
    pairs = (real[:, :, None] & real[:, None, :] & upper)[:, None]  # (B, 1, T, T): valid pairs i < j
    skip: Dict[int, List[int]] = {}
    for layer, head in ablated:
        skip.setdefault(int(layer), []).append(int(head))
    changed = torch.zeros((), dtype=torch.float64)
    total = torch.zeros((), dtype=torch.float64)
    for layer, (za, zc) in enumerate(zip(z, clean_z)):
        clean_csm = context_similarity(zc.double(), normalise).masked_fill(~pairs, 0.0)  # (B, H, T, T)
        total = total + clean_csm.abs().sum().cpu()
        diff = (context_similarity(za.double(), normalise).masked_fill(~pairs, 0.0) - clean_csm).abs().sum((0, 2, 3))  # (H,)
        keep = torch.ones_like(diff, dtype=torch.bool)
        keep[skip.get(layer, [])] = False
        changed = changed + diff[keep].sum().cpu()
    index = METRICS.index("csm_change")
    sums[index], counts[index] = changed, total
    return sums, counts


def effect(clean: torch.Tensor, ablated: torch.Tensor, higher_is_better: bool) -> torch.Tensor:
    """Damage done by an ablation: ``clean - ablated`` (higher is better) or ``ablated - clean`` (losses).

    Args:
        clean: the clean run's metric (any shape, broadcast against ``ablated``).
        ablated: the ablated runs' metric.
    """
    return clean - ablated if higher_is_better else ablated - clean


def random_baseline(effects: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Mean and spread (sample standard deviation, ddof = 1) of the random draws' effects.

    Args:
        effects: (..., draws).

    Returns:
        (mean, std), each (...); NaN std with fewer than 2 draws, NaN both with none.
    """
    if effects.shape[-1] == 0:
        nan = torch.full(effects.shape[:-1], float("nan"), dtype=effects.dtype)
        return nan, nan.clone()
    mean = effects.mean(-1)
    std = effects.std(-1, correction=1) if effects.shape[-1] > 1 else torch.full_like(mean, float("nan"))
    return mean, std


def zscore(value: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
    """``(value - mean) / std``; NaN where ``std`` is 0 or NaN."""
    return safe_divide(value - mean, std)


def restored_share(patched: torch.Tensor, corrupted: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
    """``(patched - corrupted) / (clean - corrupted)`` of mean logit differences; NaN where clean equals corrupted."""
    return safe_divide(patched - corrupted, clean - corrupted)


def random_head_sets(n_layers: int, n_heads: int, size: int, draws: int, seed: int) -> List[List[Tuple[int, int]]]:
    """``draws`` random sets of ``size`` distinct heads, reproducible under ``seed``.

    Heads are drawn uniformly without replacement from all n_layers x n_heads heads, with
    ``numpy.random.default_rng([seed, size])``: the same seed and size give the same sets.

    Returns:
        ``draws`` lists of ``(layer, head)``, each sorted.
    """
    total = n_layers * n_heads
    if not 1 <= size <= total:
        raise ValueError(f"a random head set needs 1..{total} heads, not {size}")
    rng = np.random.default_rng([int(seed), int(size)])
    sets = []
    for _ in range(draws):
        flat = sorted(int(i) for i in rng.choice(total, size=size, replace=False))
        sets.append([(i // n_heads, i % n_heads) for i in flat])
    return sets


class MetricSums(Accumulator):
    """Sums and counts of every task metric (``METRICS``) for each of ``n_passes`` passes (clean first).

    States: ``sums`` and ``counts``, (n_passes, len(METRICS)) float64; ``compute()`` gives ``mean``
    (n_passes, len(METRICS)), NaN where a metric was not measured.
    """

    def __init__(self, n_passes: int, **kwargs):
        super().__init__(**kwargs)
        self.add_sum("sums", n_passes, len(METRICS))
        self.add_sum("counts", n_passes, len(METRICS))

    def update(self, sums: torch.Tensor, counts: torch.Tensor) -> None:  # type: ignore[override]
        """Add one batch's (n_passes, len(METRICS)) sums and counts."""
        self.fold({"sums": sums.to(self.sums), "counts": counts.to(self.counts)})

    def compute(self) -> Dict[str, torch.Tensor]:
        return {"mean": safe_divide(self.sums, self.counts)}


def set_effects(
    means: torch.Tensor, metrics: Sequence[str], n_sets: int, random_index: Dict[int, List[int]], set_sizes: Sequence[int]
) -> Dict[str, Dict[str, torch.Tensor]]:
    """Effect, random mean, random spread and z-score of every head set, per metric.

    Args:
        means: (n_passes, len(METRICS)) metric means; pass 0 is clean, passes 1..n_sets the sets, then the random draws.
        metrics: the metric names measured.
        n_sets: number of head sets.
        random_index: set size -> pass indices of its random draws.
        set_sizes: size of each set.

    Returns:
        metric -> {"clean": (), "ablated": (n_sets,), "effect", "random_mean", "random_std", "zscore": (n_sets,)}.
    """
    out: Dict[str, Dict[str, torch.Tensor]] = {}
    for name in metrics:
        column = means[:, METRICS.index(name)].double().cpu()
        better = HIGHER_IS_BETTER[name]
        clean = column[0]
        ablated = column[1 : 1 + n_sets]
        eff = effect(clean, ablated, better)
        rand_mean = torch.empty(n_sets, dtype=torch.float64)
        rand_std = torch.empty(n_sets, dtype=torch.float64)
        for s, size in enumerate(set_sizes):
            passes = random_index.get(int(size), [])
            m, sd = random_baseline(effect(clean, column[passes], better)[None] if passes else torch.empty(1, 0, dtype=torch.float64))
            rand_mean[s], rand_std[s] = m[0], sd[0]
        out[name] = {
            "clean": clean,
            "ablated": ablated,
            "effect": eff,
            "random_mean": rand_mean,
            "random_std": rand_std,
            "zscore": zscore(eff, rand_mean, rand_std),
        }
    return out


def rank_heads(values: torch.Tensor, top: int) -> List[Tuple[int, int]]:
    """The ``top`` heads with the largest values of a (layer, head) statistic (NaN last, ties by position).

    Returns:
        ``(layer, head)`` pairs, largest first.
    """
    flat = values.double().flatten().nan_to_num(nan=float("-inf"))
    order = sorted(range(flat.numel()), key=lambda i: (-float(flat[i]), i))[:top]
    n_heads = values.shape[1]
    return [(i // n_heads, i % n_heads) for i in order]


def spearman(x: torch.Tensor, y: torch.Tensor) -> Optional[float]:
    """Spearman rank correlation of two equally shaped tensors over the entries finite in both (None with fewer than 3, or a constant)."""
    a, b = x.double().flatten(), y.double().flatten()
    keep = torch.isfinite(a) & torch.isfinite(b)
    if int(keep.sum()) < 3:
        return None
    ranks = [_average_ranks(v[keep].numpy()) for v in (a, b)]
    if any(np.ptp(r) == 0 for r in ranks):  # a constant has no ranking
        return None
    value = np.corrcoef(ranks[0], ranks[1])[0, 1]
    return float(value)


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """Ranks 1..n, tied values sharing their mean rank."""
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.arange(1, len(values) + 1)
    for value in np.unique(values):
        tied = values == value
        ranks[tied] = ranks[tied].mean()
    return ranks


class TaskMetric:
    """What each forward pass of an intervention run is measured by, for one kind of model head.

    ``inputs(batch)`` gives the forward's keyword arguments (a masked LM's inputs have the drawn tokens
    replaced by the mask token); ``sums(outputs, batch, clean, z, clean_z, heads)`` gives that pass's
    (sums, counts), each (len(METRICS),) float64, ``clean`` being the clean pass's outputs of the same batch.
    When ``needs_z`` (an encoder's ``csm_change``), the module also hands over both passes' Z, per layer
    (batch, head, pos, d_head), and the ablated set ``heads``.

    Args:
        kind: ``classifier`` (batch needs ``labels``), ``masked_lm``, ``causal_lm`` or ``encoder``.
        mask_token_id: the tokenizer's mask token (``masked_lm``).
        mask_fraction: share of content tokens masked (``masked_lm``).
        seed: the run's seed (which tokens are masked).
        normalise: the CSM of ``csm_change`` (``stats.normalise``: ``none`` or ``cosine``).
        repeated: the windows are repeated random tokens (a causal LM adds ``repeat_loss`` and ``first_copy_loss``;
            batches then carry ``earlier_position`` and ``sentence_ids``).
    """

    def __init__(
        self, kind: str, mask_token_id: Optional[int] = None, mask_fraction: float = 0.15, seed: int = 0, normalise: str = "none", repeated: bool = False
    ):
        if kind not in TASK_METRICS:
            raise ValueError(f"unknown model head kind {kind!r}; one of {', '.join(TASK_METRICS)}")
        self.kind = kind
        self.repeated = repeated and kind == "causal_lm"
        self.metrics = TASK_METRICS[kind] + (REPEATED_METRICS if self.repeated else ())
        self.mask_token_id = mask_token_id
        self.mask_fraction = mask_fraction
        self.seed = seed
        self.normalise = normalise
        self.needs_z = "csm_change" in self.metrics

    def _masked(self, batch) -> torch.Tensor:
        # drawn once per batch (the clean pass), reused by its ablated passes
        key = tuple(batch["index"].tolist())
        if getattr(self, "_mask_key", None) != key:
            self._mask_key, self._mask = key, masked_positions(batch["special_mask"], batch["attention_mask"], batch["index"], self.mask_fraction, self.seed)
        return self._mask

    def inputs(self, batch) -> Dict[str, torch.Tensor]:
        """Forward keyword arguments: ``input_ids`` (masked for a masked LM) and ``attention_mask``."""
        ids = batch["input_ids"]
        if self.kind == "masked_lm":
            ids = ids.masked_fill(self._masked(batch), int(self.mask_token_id))
        return {"input_ids": ids, "attention_mask": batch["attention_mask"]}

    def sums(
        self,
        outputs,
        batch,
        clean,
        z: Optional[Sequence[torch.Tensor]] = None,
        clean_z: Optional[Sequence[torch.Tensor]] = None,
        heads: Sequence[Tuple[int, int]] = (),
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """(sums, counts) of this kind's metrics for one pass (see the module docstring).

        Raises:
            ValueError: an encoder's pass without both passes' Z (``needs_z``)."""
        if self.kind == "classifier":
            return classification_sums(outputs.logits, batch["labels"])
        if self.kind == "masked_lm":
            targets = batch["input_ids"].masked_fill(~self._masked(batch), -100)
            return token_loss_sums(outputs.logits, targets, "mlm_loss")
        if self.kind == "causal_lm":
            targets = next_token_targets(batch["input_ids"], batch["attention_mask"])
            sums, counts = token_loss_sums(outputs.logits, targets, "lm_loss")
            if self.repeated:  # the in-context loss: the same cross-entropy on the later copies, and on the first
                for part, name in zip(copy_targets(targets, batch["earlier_position"], batch["sentence_ids"]), REPEATED_METRICS):
                    part_sums, part_counts = token_loss_sums(outputs.logits, part, name)
                    sums, counts = sums + part_sums, counts + part_counts
            return sums, counts
        sums, counts = cosine_sums(outputs.last_hidden_state, clean.last_hidden_state, batch["attention_mask"])
        if z is None or clean_z is None:
            raise ValueError("the encoder's csm_change needs the Z of the pass and of the clean pass")
        csm_sums, csm_counts = csm_change_sums(z, clean_z, batch["attention_mask"], heads, self.normalise)
        return sums + csm_sums, counts + csm_counts


class PatchSums(Accumulator):
    """Sums of activation patching's logit differences over prompt pairs.

    States: ``clean`` and ``corrupted`` (1,), ``patched`` (layer, head), ``pairs`` (1,), all float64 sums.
    ``compute()`` gives the means ``clean_logit_diff``, ``corrupted_logit_diff`` (scalars),
    ``patched_logit_diff`` (layer, head) and ``restored_share`` (layer, head, :func:`restored_share` of the means).
    """

    def __init__(self, n_layers: int, n_heads: int, **kwargs):
        super().__init__(**kwargs)
        self.add_sum("clean", 1)
        self.add_sum("corrupted", 1)
        self.add_sum("patched", n_layers, n_heads)
        self.add_sum("pairs", 1)

    def update(self, clean: torch.Tensor, corrupted: torch.Tensor, patched: torch.Tensor) -> None:  # type: ignore[override]
        """Add one batch: ``clean``, ``corrupted`` (B,) and ``patched`` (layer, head, B) logit differences."""
        self.fold(
            {
                "clean": clean.double().sum().reshape(1).to(self.clean),
                "corrupted": corrupted.double().sum().reshape(1).to(self.corrupted),
                "patched": patched.double().sum(-1).to(self.patched),
                "pairs": torch.tensor([float(clean.numel())], dtype=torch.float64, device=self.pairs.device),
            }
        )

    def compute(self) -> Dict[str, torch.Tensor]:
        clean = safe_divide(self.clean, self.pairs)[0]
        corrupted = safe_divide(self.corrupted, self.pairs)[0]
        patched = safe_divide(self.patched, self.pairs.expand_as(self.patched))
        return {
            "clean_logit_diff": clean,
            "corrupted_logit_diff": corrupted,
            "patched_logit_diff": patched,
            "restored_share": restored_share(patched, corrupted, clean),
        }
