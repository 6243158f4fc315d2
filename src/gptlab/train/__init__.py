"""The training science around the plain model: the LightningModule, optimizers and schedules, and the callbacks
that measure or steer a run (samples, throughput, stability probes, loss-spike guard, zero-shot eval)."""
