"""How the model runs on its devices, applied from outside the plain model in one place (parallelize): compile,
activation checkpointing, FSDP sharding, float8, the SDPA kernel, and the peak FLOP/s that MFU divides by."""
