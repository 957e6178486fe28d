"""Fine-tuning (Lightning ``fit``) that produces ``save_pretrained`` checkpoints for sweeps.

Light on purpose: importing this package loads neither torch nor Lightning;
:mod:`attnsim.training.finetune` holds the entry point, :mod:`.data` the
labelled windows and :mod:`.module` the LightningModule, logger and
checkpoint callback.
"""
