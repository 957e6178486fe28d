"""Corpus context: a logged run's per-head statistics beside the live maps (``attnsim explore --run RUN_ID``).

The run is read by the one reader of logged runs (:class:`attnsim.analysis.runs.LoggedRun`, as ``compare`` and
``report`` read them): every heads table ``tables/<finding>_heads.csv`` it logged gives, per head, each of its
columns, named ``finding/column``: numbers (short-range share and its chance, induction score, an ablation's
effect, ...) that the page can sort and colour the heads by; and from ``tables/anchors_top.csv`` each head's
most frequent anchor token (``anchors/anchor_token``) with the share of windows it anchors.

A run of another model is refused: its ``attnsim.shape`` tag (layers x heads x d_head) must equal the loaded
model's, and its model path (``attnsim.model_path``; for a run without it, the name ``attnsim.model``) the loaded one's.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

from attnsim.errors import AttnsimError

# columns the page lists first (the four: anchor token, short-range share beside chance, induction, effect)
FIRST = ("anchor_token", "short_range", "induction_score", "effect", "delta", "z_score", "anchor")


class RunRefused(AttnsimError):
    """The run cannot stand beside this model: unknown, not a measurement, or of another model."""


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "item"):
        return _cell(value.item())
    return value


def corpus_context(run_id: str, info: Any, uri: Optional[str] = None) -> Dict[str, Any]:
    """Every per-head statistic a logged run of the loaded model holds.

    Args:
        run_id: the MLflow run id (printed by ``attnsim run``).
        info: the loaded model's :class:`~attnsim.capture.load.ModelInfo`.
        uri: the tracking store (default ``$MLFLOW_TRACKING_URI``, else ./mlruns).

    Returns:
        ``{"run_id", "name", "model", "stats": [names], "values": {name: L x H grid}, "kinds": {name: "number"|"text"}}``;
        a cell a head table lacks is None.

    Raises:
        RunRefused: the run is not in the store, is not a measurement, was logged for another model, or holds no heads table.
    """
    from attnsim.analysis.runs import LoggedRun, download_table
    from attnsim.keys import RunKind, Tag
    from attnsim.tracking.store import Tracker

    run_id = str(run_id or "").strip()
    if not run_id:
        raise RunRefused("No run id given. Pass --run RUN_ID (a run of this model printed by `attnsim run`), or leave it out.")
    tracker = Tracker(uri)
    try:
        tracker.check()
        run = tracker.client.get_run(run_id)
    except Exception as exc:  # noqa: BLE001 - MLflow raises its own exception types
        raise RunRefused(
            f"Run '{run_id}' is not in the tracking store {tracker.uri} ({str(exc).splitlines()[0][:160]}). Give a run id printed by `attnsim run`, and its store (--uri or MLFLOW_TRACKING_URI)."
        ) from exc
    logged = LoggedRun.of(run, tracker.client)
    if not RunKind.of(logged.tags).is_measurement:
        raise RunRefused(f"Run '{run_id}' is a {RunKind.of(logged.tags).value} run, not a measurement; give a run of `attnsim run` on {info.name}.")
    shape = f"{info.n_layers}x{info.n_heads}x{info.d_head}"
    their_shape = logged.tag(Tag.SHAPE)
    # the same model: its path (attnsim.model_path), or its name where the run has no path tag; a short name alone
    # (a folder's name, attnsim.model) could be another folder's
    path = logged.tag(Tag.MODEL_PATH)
    same = path == info.path if path is not None else logged.tag(Tag.MODEL) in (info.name, info.path)
    if their_shape != shape or not same:
        model = logged.tag(Tag.MODEL) or logged.tag(Tag.MODEL_PATH) or "an unknown model"
        raise RunRefused(
            f"Run '{run_id}' ({logged.name}) measured {model} ({their_shape or 'shape not tagged'} layers x heads x d_head), but the explorer has "
            f"{info.name} ({shape}) loaded: its heads are not this model's heads. Give a run of {info.name}, or start attnsim explore with that run's model "
            f"(model.path={logged.params.get('model.path') or logged.tag(Tag.MODEL_PATH) or '...'})."  # as the run was given it: smollm2, not a cache folder
        )
    values: Dict[str, List[List[Any]]] = {}
    kinds: Dict[str, str] = {}
    for finding in logged.findings:
        table = logged.head_table(finding)
        if table is None or not {"layer", "head"} <= set(table.columns):
            continue
        for column in table.columns:
            if column in ("layer", "head"):
                continue
            name = f"{finding}/{column}"
            grid: List[List[Any]] = [[None] * info.n_heads for _ in range(info.n_layers)]
            for layer, head, value in zip(table["layer"], table["head"], table[column]):
                if 0 <= int(layer) < info.n_layers and 0 <= int(head) < info.n_heads:
                    grid[int(layer)][int(head)] = _cell(value)
            numeric = all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for row in grid for v in row)
            values[name] = grid
            kinds[name] = "number" if numeric else "text"
    anchors = download_table(tracker.client, run_id, "tables/anchors_top.csv", logged.artifact_uri) if "anchors" in logged.findings else None
    if anchors is not None and {"layer", "head", "rank", "token", "share"} <= set(anchors.columns):
        token: List[List[Any]] = [[None] * info.n_heads for _ in range(info.n_layers)]
        share: List[List[Any]] = [[None] * info.n_heads for _ in range(info.n_layers)]
        for row in anchors[anchors["rank"] == 1].itertuples():  # each head's most frequent anchor over the corpus
            if 0 <= int(row.layer) < info.n_layers and 0 <= int(row.head) < info.n_heads:
                token[int(row.layer)][int(row.head)] = str(row.token)
                share[int(row.layer)][int(row.head)] = _cell(float(row.share))
        values["anchors/anchor_token"], kinds["anchors/anchor_token"] = token, "text"
        values["anchors/anchor_token_windows_share"], kinds["anchors/anchor_token_windows_share"] = share, "number"
    if not values:
        raise RunRefused(
            f"Run '{run_id}' ({logged.name}) logged no per-head table (tables/<finding>_heads.csv); run a finding with tables, e.g. `attnsim run paper model.path=...`."
        )
    order = sorted(values, key=lambda n: (next((i for i, word in enumerate(FIRST) if word in n), len(FIRST)), n))
    return {"run_id": run_id, "name": logged.name, "model": logged.tag(Tag.MODEL), "partial": logged.partial, "stats": order, "values": values, "kinds": kinds}


__all__ = ["RunRefused", "corpus_context"]
