"""Lightning glue around the plain model: the LightningModule, the run, callbacks, optimizers, checkpoints."""
