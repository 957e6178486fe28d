"""Gradient-weighted attention maps of a classifier, as pure tensor functions.

Sources:

- Gradient-weighted rollout: H. Chefer, S. Gur, L. Wolf, "Generic
  Attention-model Explainability for Interpreting Bi-Modal and
  Encoder-Decoder Transformers", ICCV 2021 (arXiv:2103.15679), Eqs. 5-6.
  Per layer l, ``Ā_l = mean_h ReLU(∇A_l ⊙ A_l)``, where ``∇A_l`` is the
  gradient of the target class logit y_c with respect to the attention
  probabilities ``A_l`` (head, query_pos, key_pos); then ``R_0 = I`` and
  ``R_l = R_{l-1} + Ā_l R_{l-1}`` (rollout with the identity, rows not
  renormalised). The readout row ``R_L[CLS, :]`` scores the input tokens.
- Class-discriminative attention maps (CDAM): L. Brocki, N. C. Chung,
  "Class-Discriminative Attention Maps for Vision Transformers",
  arXiv:2312.02364 (2023). For the tokens ``T`` (pos, d_model) that enter
  the final transformer block, ``S_i = sum_d T[i, d] ∂y_c/∂T[i, d]``: signed
  (positive: evidence for class c, negative: against), in logit units.

The target class c is chosen per item (the predicted class by default); its
logit is differentiated, not a softmax probability. Every item of a batch is
processed alike: items are independent, so the gradient of the batch sum of
target logits gives each item its own gradient.
"""

from __future__ import annotations

from typing import Dict, Optional, Sequence

import torch

from attnsim.stats.base import Accumulator, safe_divide


def gradient_weighted_attention(attention: torch.Tensor, gradients: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Per-head relevance ``ReLU(∇A ⊙ A)`` (Chefer et al. 2021, Eq. 5 before the head mean).

    Args:
        attention: (layer, batch, head, query_pos, key_pos) attention probabilities.
        gradients: same shape, ∂y_c/∂A (logit units per unit of attention weight).
        valid: (batch, pos) bool real tokens; entries in a padding row or column are set to 0.

    Returns:
        (layer, batch, head, query_pos, key_pos), >= 0, logit units.

    Raises:
        ValueError: the shapes differ.
    """
    if attention.shape != gradients.shape:
        raise ValueError(f"attention {tuple(attention.shape)} and gradients {tuple(gradients.shape)} differ in shape")
    relevance = (gradients * attention).clamp_min(0)
    if valid is not None:
        pairs = valid[:, None, :, None] & valid[:, None, None, :]  # (B, 1, T, T)
        relevance = relevance * pairs.to(relevance.dtype)
    return relevance


def gradient_rollout(relevance: torch.Tensor) -> torch.Tensor:
    """Gradient-weighted rollout after every layer (Chefer et al. 2021, Eqs. 5-6).

    Args:
        relevance: (layer, batch, head, query_pos, key_pos) from :func:`gradient_weighted_attention`.

    Returns:
        (layer, batch, query_pos, key_pos): ``R_l = (I + Ā_l) R_{l-1}``, ``R_{-1} = I``, with
        ``Ā_l`` the head mean of ``relevance[l]``. Rows are not normalised (logit units on top of the identity).
    """
    mean = relevance.mean(2)  # (L, B, T, T)
    size = mean.shape[-1]
    current = torch.eye(size, dtype=mean.dtype, device=mean.device).expand(mean.shape[1], size, size)
    out = []
    for layer in range(mean.shape[0]):
        current = current + mean[layer] @ current  # R += Ā R
        out.append(current)
    return torch.stack(out)


def cdam(tokens: torch.Tensor, gradients: torch.Tensor, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Class-discriminative attention map scores (Brocki & Chung 2023, CDAM).

    Args:
        tokens: (batch, pos, d_model) tokens entering the final transformer block.
        gradients: same shape, ∂y_c/∂tokens.
        valid: (batch, pos) bool real tokens; padding scores are set to 0.

    Returns:
        (batch, pos) ``S_i = sum_d T[i, d] · ∂y_c/∂T[i, d]``, signed, logit units.

    Raises:
        ValueError: the shapes differ.
    """
    if tokens.shape != gradients.shape:
        raise ValueError(f"tokens {tuple(tokens.shape)} and gradients {tuple(gradients.shape)} differ in shape")
    scores = (tokens * gradients).sum(-1)
    if valid is not None:
        scores = scores * valid.to(scores.dtype)
    return scores


class GradientMapAccumulator(Accumulator):
    """Corpus-level summaries of gradient-weighted maps.

    Per layer and head (scalars, (layer, head)):

    - ``head_relevance``: mean over windows of ``sum_{i,j} ReLU(∇A ⊙ A)[l, h, i, j]`` (logit units):
      how much positive gradient-weighted attention the head carries for the target class.
    - ``relevance_share``: mean over windows of the head's share of the window's total positive
      relevance over every layer and head (unitless).

    Over the corpus (``metrics``), for token categories (e.g. cls, sep, punct):

    - ``cdam_<category>_share``: share of a window's absolute CDAM mass ``sum_i |S_i|`` on the
      category's tokens, mean over windows; ``cdam_positive_share``: share of that mass with S_i > 0.
    - ``rollout_<category>_mass``: share of the readout row of the final gradient-weighted rollout
      ``R_L[r, :]`` on the category, mean over windows.
    - ``target_probability``: mean softmax probability of the target class;
      ``target_is_predicted``: share of windows whose target is the predicted class.

    Args:
        n_layers, n_heads: model shape.
        categories: token category names.
    """

    def __init__(self, n_layers: int, n_heads: int, categories: Sequence[str]):
        super().__init__()
        self.categories = tuple(categories)
        self.add_sum("relevance_sum", n_layers, n_heads)
        self.add_sum("share_sum", n_layers, n_heads)
        self.add_sum("share_windows")
        self.add_sum("windows")
        self.add_sum("cdam_category_sum", len(self.categories))
        self.add_sum("cdam_positive_sum")
        self.add_sum("cdam_windows")
        self.add_sum("rollout_category_sum", len(self.categories))
        self.add_sum("probability_sum")
        self.add_sum("predicted_sum")

    def update(  # type: ignore[override]
        self,
        relevance: torch.Tensor,
        rollout_readout: torch.Tensor,
        scores: torch.Tensor,
        categories: Dict[str, torch.Tensor],
        probability: torch.Tensor,
        is_predicted: torch.Tensor,
    ) -> None:
        """Fold one batch in.

        Args:
            relevance: (layer, batch, head, T, T) from :func:`gradient_weighted_attention`.
            rollout_readout: (batch, T) readout row of the final :func:`gradient_rollout`.
            scores: (batch, T) :func:`cdam` scores.
            categories: name -> (batch, T) bool.
            probability: (batch,) softmax probability of the target class.
            is_predicted: (batch,) bool, target == predicted class.
        """
        per_head = relevance.double().sum((-1, -2))  # (L, B, H)
        self.relevance_sum += per_head.sum(1)
        total = per_head.sum((0, 2))  # (B,)
        defined = total > 0
        share = per_head / total.where(defined, torch.ones_like(total))[None, :, None]
        self.share_sum += (share * defined.double()[None, :, None]).sum(1)
        self.share_windows += defined.double().sum()
        self.windows += float(relevance.shape[1])
        scores = scores.double()
        absolute = scores.abs()
        mass = absolute.sum(-1)  # (B,)
        has_mass = mass > 0
        safe = mass.where(has_mass, torch.ones_like(mass))
        row = rollout_readout.double()
        row_total = row.sum(-1)
        row_total = row_total.where(row_total > 0, torch.ones_like(row_total))
        for c, name in enumerate(self.categories):
            mask = categories[name].double()
            self.cdam_category_sum[c] += (((absolute * mask).sum(-1) / safe) * has_mass.double()).sum()
            self.rollout_category_sum[c] += ((row * mask).sum(-1) / row_total).sum()
        self.cdam_positive_sum += ((scores.clamp_min(0).sum(-1) / safe) * has_mass.double()).sum()
        self.cdam_windows += has_mass.double().sum()
        self.probability_sum += probability.double().sum()
        self.predicted_sum += is_predicted.double().sum()

    def compute(self) -> Dict[str, torch.Tensor]:
        """``head_relevance`` and ``relevance_share`` (layer, head); the corpus numbers of the class docstring as 0-d tensors."""
        out: Dict[str, torch.Tensor] = {
            "head_relevance": safe_divide(self.relevance_sum, self.windows),
            "relevance_share": safe_divide(self.share_sum, self.share_windows),
        }
        for c, name in enumerate(self.categories):
            out[f"cdam_{name}_share"] = safe_divide(self.cdam_category_sum[c], self.cdam_windows)
            out[f"rollout_{name}_mass"] = safe_divide(self.rollout_category_sum[c], self.windows)
        out["cdam_positive_share"] = safe_divide(self.cdam_positive_sum, self.cdam_windows)
        out["target_probability"] = safe_divide(self.probability_sum, self.windows)
        out["target_is_predicted"] = safe_divide(self.predicted_sum, self.windows)
        return out


__all__ = ["gradient_weighted_attention", "gradient_rollout", "cdam", "GradientMapAccumulator"]
