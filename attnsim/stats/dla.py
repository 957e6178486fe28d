"""Direct logit attribution (DLA): each head's direct effect on the logit of the actual next token.

A causal LM's logits are ``N(x) · W_Uᵀ + b_U`` with x the final residual stream, which is a sum of components:
the embeddings, every head's ``result`` (z · W_O[h]), every layer's W_O bias and every MLP's output. With the final
norm's scale σ_i frozen at its clean value (Elhage et al. 2021; nostalgebraist 2020; TransformerLens's
``ActivationCache.apply_ln_to_stack``), N is affine and the logit of token t at position i splits exactly:

    logit_i[t] = Σ_c  c_i · u_i(t)  +  b · W_U[t] + b_U[t],      u_i(t) = centre(g ⊙ W_U[t]) / σ_i

(``centre`` subtracts the mean over d_model for a LayerNorm and is the identity for an RMSNorm; g and b are the
norm's weight and bias). A head's DLA is its term with t the actual next token and a **baseline** subtracted: the
mean logit over the vocabulary, i.e. ``W_U[t]`` replaced by ``W_U[t] − mean_v W_U[v]`` (so a head that raises every
token alike scores 0). The decomposition check sums every component's term without the baseline and compares it
with the model's own logit (its final norm module applied to x, times ``W_U[t]``, plus ``b_U[t]``).

Per head the corpus statistics are the mean, the population standard deviation (per-batch two-pass centred sums
combined as Chan et al. 1979 do, never a raw ``E[x²] − E[x]²`` over the positions) and the share of positions where
the head raises the correct token (DLA > 0). Only the W_U rows of the target tokens are gathered: no
(position, vocabulary) tensor is built.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import torch

from attnsim.stats.base import Accumulator, safe_divide


def readout_directions(w_target: torch.Tensor, gain: torch.Tensor, centred: bool, sigma: torch.Tensor, w_mean: Optional[torch.Tensor] = None) -> torch.Tensor:
    """u_i: the direction in the residual stream whose dot product with a component is its direct logit.

    Args:
        w_target: (N, d_model) the unembedding rows W_U[t_i] of the N positions' target tokens.
        gain: (d_model,) the final norm's g. centred: the norm subtracts the mean (LayerNorm).
        sigma: (N,) the final norm's scale at each position (frozen, from the clean pass).
        w_mean: (d_model,) the mean unembedding row (the baseline: mean logit over the vocabulary), or None for the raw logit.

    Returns:
        (N, d_model) float32 directions ``centre(g ⊙ (W_U[t] − w_mean)) / σ``.
    """
    w = w_target.float() - (w_mean.float() if w_mean is not None else 0.0)
    u = gain.float() * w
    if centred:  # (c − mean(c)) · v = c · (v − mean(v)): the LayerNorm's centring moves onto the direction
        u = u - u.mean(-1, keepdim=True)
    return u / sigma.float()[:, None]


def head_attribution(results: Sequence[torch.Tensor], valid: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """Each head's direct logit at the valid positions.

    Args:
        results: per layer, (batch, pos, head, d_model) the heads' ``result``.
        valid: (batch, pos) bool, the N positions measured.
        directions: (N, d_model) from :func:`readout_directions`, in the order of ``valid``'s true entries.

    Returns:
        (layer, head, N) float32.
    """
    return torch.stack([torch.einsum("nhd,nd->hn", r[valid].float(), directions) for r in results])


def stream_attribution(streams: Sequence[torch.Tensor], valid: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """The direct logit of residual-stream components (embeddings, an MLP's output): (len(streams), N) float32.

    Args:
        streams: tensors (batch, pos, d_model).
    """
    return torch.stack([(s[valid].float() * directions).sum(-1) for s in streams])


def _moments_update(values: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Increments of the per-head sums from one batch's values (layer, head, N), float64.

    Returns:
        ``count``, ``total`` (Σ x), ``between`` (n·m², the batch mean's square times its count), ``centred`` (Σ (x − m)²,
        two-pass within the batch) and ``positive`` (positions with x > 0), each (layer, head).
    """
    x = values.double()
    n = x.shape[-1]
    mean = x.mean(-1) if n else torch.zeros(x.shape[:2], dtype=torch.float64)
    count = torch.full(x.shape[:2], float(n), dtype=torch.float64)
    return {
        "count": count,
        "total": x.sum(-1),
        "between": count * mean * mean,
        "centred": ((x - mean[..., None]) ** 2).sum(-1),
        "positive": (x > 0).double().sum(-1),
    }


def _moments_compute(count: torch.Tensor, total: torch.Tensor, between: torch.Tensor, centred: torch.Tensor, positive: torch.Tensor) -> Dict[str, torch.Tensor]:
    """Mean, population standard deviation and share of positive values from the summed states (NaN where count is 0).

    Variance = (Σ_b C_b + Σ_b n_b m_b² − N m²) / N: the within-batch centred sums (two-pass, exact whatever the offset)
    plus the spread of the batch means about the corpus mean (Chan et al. 1979's combination, summed over batches; it
    loses digits only when the mean is some 1e6 times the spread or more, far from direct logits' scale).
    """
    mean = safe_divide(total, count)
    spread = (centred + between - count * torch.nan_to_num(mean) ** 2).clamp_min(0)
    return {"mean": mean, "std": torch.sqrt(safe_divide(spread, count)), "positive_share": safe_divide(positive, count)}


class HeadAttribution(Accumulator):
    """Per head (layer, head): the corpus mean and standard deviation of DLA and the share of positions it is positive."""

    def __init__(self, n_layers: int, n_heads: int, **kwargs):
        super().__init__(**kwargs)
        for name in ("count", "total", "between", "centred", "positive"):
            self.add_sum(name, n_layers, n_heads)

    def update(self, values: torch.Tensor) -> None:  # noqa: D102 - values: (layer, head, N)
        self.fold(_moments_update(values))

    def compute(self) -> Dict[str, torch.Tensor]:  # noqa: D102
        out = _moments_compute(self.count, self.total, self.between, self.centred, self.positive)
        return {"dla_mean": out["mean"], "dla_std": out["std"], "dla_positive_share": out["positive_share"]}


class Decomposition(Accumulator):
    """The decomposition check: Σ |components' sum − the model's logit| over Σ |the model's logit|, and positions counted."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        for name in ("error", "scale", "positions"):
            self.add_sum(name)

    def update(self, summed: torch.Tensor, logit: torch.Tensor) -> None:
        """Fold one batch: ``summed`` (N,) the components' sum, ``logit`` (N,) the model's logit of the same tokens."""
        self.fold(
            {"error": (summed.double() - logit.double()).abs().sum(), "scale": logit.double().abs().sum(), "positions": torch.tensor(float(logit.numel()))}
        )

    def compute(self) -> Dict[str, torch.Tensor]:  # noqa: D102
        return {"decomposition_error": safe_divide(self.error, self.scale), "positions": self.positions}


__all__ = ["Decomposition", "HeadAttribution", "head_attribution", "readout_directions", "stream_attribution"]
