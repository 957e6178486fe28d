"""Workflows: what ``attnsim run``, ``sweep`` and ``finetune`` do, each returning a result dataclass.

- :mod:`attnsim.workflows.run`: one measurement run (:func:`~attnsim.workflows.run.run` -> ``RunResult``).
- :mod:`attnsim.workflows.kinds`: one object per kind of measurement run (text, images, gradients,
  encoder–decoder, interventions), chosen once by :func:`~attnsim.workflows.kinds.choose_kind`.
- :mod:`attnsim.workflows.sweep`: a measurement over fine-tuning checkpoints (``SweepResult``).
- :mod:`attnsim.workflows.finetune`: a Lightning ``fit`` with checkpoints (``FinetuneResult``).
- :mod:`attnsim.workflows.common`: what they share (tracker set-up, seeding, dataset inputs, tags).

Workflows sit above config, data, capture, stats, findings, plots and tracking and below
:mod:`attnsim.cli`; they never parse arguments or print (``cli`` does).
"""
