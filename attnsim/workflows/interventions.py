"""Wiring of the intervention findings (``ablation``, ``patching``) into the measurement workflow (``attnsim run``).

An intervention run is an ordinary ``attnsim run``: the same checks before any model loads, the same
MLflow run lifecycle and logging (:mod:`attnsim.workflows.run`). Its kind,
:class:`~attnsim.workflows.kinds.interventions.InterventionRun`, calls what differs, written here:

- the checks of ``interventions.*`` against the model (before its weights load): head ranges, the earlier
  run of ``interventions.select`` and its statistic, the windows' labels for a classifier, the prompt pairs;
- the windows (``interventions.split=validation``: the validation documents of `attnsim finetune`'s seeded split);
- the model, loaded with its own head (:func:`attnsim.capture.interventions.load_task_model`), and the
  LightningModule that runs several passes per batch (:class:`~attnsim.capture.interventions.InterventionModule`,
  :class:`~attnsim.capture.interventions.PatchingModule`);
- mean ablation's first pass (:func:`predict_all`).

Cost: an ablation runs ``1 + sets + random_draws x (distinct set sizes)`` forward passes per batch
(``heads: each`` on MiniLM's 72 heads with 10 draws: 83 passes), plus one pass for ``mode: mean``; patching
runs ``2 + layers x heads`` passes per batch of pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from attnsim.errors import ConfigError, CorpusError, TrackingError
from attnsim.keys import Tag

Head = Tuple[int, int]


@dataclass
class InterventionSetup:
    """What :func:`prepare_interventions` checked and built before the model loads.

    Attributes:
        kind: the model head (:func:`attnsim.capture.interventions.head_kind`).
        labels: (windows,) class id of each window (a classifier), else None.
        top: the selected heads of ``interventions.select`` (empty when none).
        statistic_name, statistic: the earlier run's ``finding/stat`` and its (layer, head) values, or None.
        pairs: the prompt pairs of a patching run (:class:`attnsim.data.prompt_pairs.PromptPairCorpus`), else None.
    """

    kind: str
    labels: Any = None
    top: List[Head] = field(default_factory=list)
    statistic_name: Optional[str] = None
    statistic: Any = None
    pairs: Any = None


def check_findings(cfg: Any, finding_types: Sequence[type]) -> None:
    """Refuse an intervention run mixed with other findings, two intervention findings, or several processes.

    Raises:
        ConfigError: naming the fix.
    """
    names = [kind.name for kind in finding_types]
    kinds = [kind.name for kind in finding_types if kind.needs_interventions]
    if len(kinds) != len(names) or len(kinds) > 1:
        raise ConfigError(
            f"findings={names}: an intervention finding ({', '.join(kinds)}) runs passes of its own (clean, then ablated or patched) "
            "and cannot share a run with other findings or another intervention. Run it alone, e.g. `attnsim run ablation` and `attnsim run csm` as two runs."
        )
    t = cfg.trainer
    if str(t.strategy).lower() not in ("auto", "") or t.num_nodes != 1 or (t.devices not in (1, "1", "auto")):
        raise ConfigError("Intervention runs (ablation, patching) run in one process: set trainer.devices=1, trainer.num_nodes=1 and trainer.strategy=auto.")


def validation_documents(cfg: Any, documents: List[Any]) -> List[Any]:
    """The validation documents of `attnsim finetune`'s split (``trainer.val_fraction``, ``seed``), for ``interventions.split=validation``.

    Raises:
        CorpusError: documents without labels (the split is stratified by label).
    """
    from attnsim.training.data import label_names, split_documents

    label_names(documents)
    return split_documents(documents, cfg.trainer.val_fraction, cfg.seed)[1]


def selected_heads(cfg: Any, tracker: Any, n_layers: int, n_heads: int, model_type: Optional[str] = None) -> Tuple[List[Head], Optional[str], Any]:
    """The top heads of ``interventions.select`` and the statistic they were ranked by.

    The statistic is read from the earlier run's heads table ``tables/<finding>_heads.csv``.

    Returns:
        (top heads, ``finding/stat``, (layer, head) float64 tensor); ``([], None, None)`` without a select.

    Raises:
        TrackingError: the run does not exist in the tracking store.
        ConfigError: the run did not finish, has no such statistic, was measured on a model of another shape or
        (``model_type`` given) of another family (a fine-tuned checkpoint of the same model is fine), or ``select.top`` is not fewer than the model's heads (random sets
        of that size would all be the same set).
    """
    import torch

    from attnsim.analysis.runs import download_head_table
    from attnsim.stats.interventions import rank_heads

    select = cfg.interventions.select
    if not select.run:
        return [], None, None
    if select.top >= n_layers * n_heads:
        raise ConfigError(
            f"Config key 'interventions.select.top' is {select.top}, but the model has {n_layers} x {n_heads} = {n_layers * n_heads} heads: the top set would hold every head "
            f"and random sets of its size would all be that set. Give fewer than {n_layers * n_heads} heads, e.g. 5."
        )
    try:
        earlier = tracker.client.get_run(select.run)
    except Exception as exc:  # noqa: BLE001 - MLflow raises its own types for a missing run
        raise TrackingError(
            f"Config key 'interventions.select.run' is '{select.run}', which is not a run in the tracking store {tracker.uri}. Give the id of the measurement run whose statistic selects the heads (`attnsim run repetition` prints it)."
        ) from exc
    if earlier.info.status != "FINISHED":
        raise ConfigError(
            f"Config key 'interventions.select.run' is '{select.run}', a run that is {earlier.info.status}, not FINISHED: its statistics are incomplete. Give a finished run of this model."
        )
    measured = earlier.data.tags.get(Tag.MODEL_TYPE.value)
    if model_type is not None and measured is not None and measured != str(model_type):
        raise ConfigError(
            f"Config key 'interventions.select.run' is '{select.run}', a run of a {measured} model ({earlier.data.tags.get(Tag.MODEL.value, '?')}), but this run ablates a "
            f"{model_type} model: another model's statistic does not single out this model's heads. Give a run of the same model (or of the checkpoint it was fine-tuned from)."
        )
    name = str(select.metric)
    finding, _, stat = name.partition("/")
    table = download_head_table(tracker.client, select.run, finding, earlier.info.artifact_uri)
    if table is None or stat not in table:
        have = [c for c in table.columns if c not in ("layer", "head")] if table is not None else []
        example = f"{finding}/{have[0]}" if have else "repetition/repetition_score"
        raise ConfigError(
            f"Config key 'interventions.select.metric' is '{name}', but run {select.run} has no such per-head statistic (its {finding} heads table has: {', '.join(have) or 'none'}). Give finding/statistic of that run, e.g. {example}."
        )
    if int(table["layer"].max()) + 1 != n_layers or int(table["head"].max()) + 1 != n_heads:
        raise ConfigError(
            f"Run {select.run} measured a model of {int(table['layer'].max()) + 1} layers x {int(table['head'].max()) + 1} heads, but this model has {n_layers} x {n_heads}: its heads cannot select this model's heads. Name a run of the same model."
        )
    values = torch.full((n_layers, n_heads), float("nan"), dtype=torch.float64)
    for row in table.itertuples():
        values[int(row.layer), int(row.head)] = float(getattr(row, stat))
    top = rank_heads(values, int(select.top)) if select.top else []
    return top, name, values


def window_labels(windows: Sequence[Any], config: Any) -> Any:
    """(windows,) int64 class id of each window, by the classifier's ``label2id``.

    Raises:
        CorpusError: a window has no label, or a label the classifier does not know.
    """
    import torch

    label2id = {str(k): int(v) for k, v in (getattr(config, "label2id", None) or {}).items()}
    ids = []
    for window in windows:
        if window.label is None or str(window.label) not in label2id:
            raise CorpusError(
                f"The model is a classifier with classes {', '.join(label2id)}, and its accuracy needs each window's class, but a window of document '{window.doc_id}' is labelled {window.label!r}. "
                "Use the corpus it was fine-tuned on (corpus.source=bbc for finetune_bbc, or a JSON Lines corpus with a 'label' field)."
            )
        ids.append(label2id[str(window.label)])
    return torch.tensor(ids, dtype=torch.long)


def prepare_interventions(cfg: Any, info: Any, tokenizer: Any, corpus: Any, tracker: Any, finding_types: Sequence[type]) -> InterventionSetup:
    """Every check of an intervention run that needs no weights (see the module docstring).

    Raises:
        ConfigError, CorpusError, TrackingError: naming the problem and the fix.
    """
    from attnsim.capture.interventions import head_kind

    if info.arch.vision:
        raise ConfigError(
            f"Model '{info.name}' is a vision model; interventions measure a text model's task (classification, masked or causal LM loss, hidden states)."
        )
    kind = head_kind(info.config)
    names = {k.name for k in finding_types}
    setup = InterventionSetup(kind)
    if "patching" in names:
        from attnsim.data.prompt_pairs import prompt_pair_corpus

        if not cfg.interventions.pairs:
            raise ConfigError(
                "Missing value for config key 'interventions.pairs': the patching experiment needs a JSON Lines file of clean/corrupted prompt pairs (or bundled for the example file)."
            )
        label2id = {str(k): int(v) for k, v in (getattr(info.config, "label2id", None) or {}).items()}
        setup.pairs = prompt_pair_corpus(iv_pairs(cfg), tokenizer, kind, label2id)
        return setup
    if kind == "masked_lm" and tokenizer.mask_token_id is None:
        raise ConfigError(f"Model '{info.name}' has a masked-LM head but its tokenizer has no mask token; the masked-token loss cannot be measured.")
    if kind == "classifier":
        setup.labels = window_labels(corpus.windows, info.config)
    if str(cfg.interventions.mode) == "resample" and len(corpus) < 2:
        raise ConfigError(
            f"interventions.mode=resample takes each window's Z from another window, but the corpus has {len(corpus)} window. Use more windows (corpus.limit), or interventions.mode=zero or mean."
        )
    setup.top, setup.statistic_name, setup.statistic = selected_heads(cfg, tracker, info.n_layers, info.n_heads, info.model_type)
    from attnsim.findings.ablation import build_plan
    from attnsim.stats.interventions import TASK_METRICS

    build_plan(info.n_layers, info.n_heads, cfg.interventions.heads, setup.top, 0, cfg.seed, TASK_METRICS[kind])  # the head checks, before weights load
    return setup


def build_intervention_module(prepared: Any, findings: List[Any]) -> Tuple[Any, Dict[str, str]]:
    """Load the model with its head and wrap it in the intervention module of the run's finding.

    Returns:
        (LightningModule, model tags).
    """
    from attnsim.capture.interventions import InterventionModule, PatchingModule, load_task_model
    from attnsim.findings.ablation import build_plan
    from attnsim.stats.interventions import TaskMetric

    cfg, info, setup = prepared.cfg, prepared.info, prepared.interventions
    model, kind, tags = load_task_model(info, cfg.model.init, cfg.seed, cfg.model.attn_implementation, cfg.model.dtype)
    tags[Tag.INTERVENTION_HEAD.value] = kind
    finding = findings[0]
    if finding.name == "patching":
        tags[Tag.CORPUS.value] = f"pairs:{iv_pairs(cfg)}"
        return PatchingModule(model, info, kind), tags
    iv = cfg.interventions
    repeated = cfg.corpus.source == "repeated_tokens"  # a causal LM adds the in-context loss
    task = TaskMetric(kind, getattr(prepared.tokenizer, "mask_token_id", None), iv.mask_fraction, cfg.seed, cfg.stats.normalise, repeated)
    plan = build_plan(info.n_layers, info.n_heads, iv.heads, setup.top, iv.random_draws, cfg.seed, task.metrics, setup.statistic_name, setup.statistic)
    finding.configure(plan)
    module = InterventionModule(model, info, plan.passes(), str(iv.mode), task, setup.labels, cfg.seed)
    tags[Tag.INTERVENTION_MODE.value] = str(iv.mode)
    return module, tags


def iv_pairs(cfg: Any) -> str:
    """The prompt-pair file of a patching run (``bundled``: ``experiments/patching_pairs.jsonl``), as tagged (``attnsim.corpus=pairs:<path>``)."""
    from attnsim.config import package_dir
    from attnsim.data.prompt_pairs import BUNDLED_FILE, BUNDLED_PAIRS, pairs_path

    path = str(cfg.interventions.pairs)
    return str(package_dir("experiments") / BUNDLED_FILE if path == BUNDLED_PAIRS else pairs_path(path))


def predict_all(predict: Any, module: Any) -> None:
    """Run predict once, or twice for mean ablation (the first pass sums each head's Z, then the module measures)."""
    if getattr(module, "phase", None) == "mean":
        predict()
        module.finish_mean()
    predict()
