"""How a run is run, apart from what it computes: the entry scripts' error handling, run dirs, Hydra and DDP
launch glue, signals and preemption, rank watching, config checks, device/memory guards and planning."""
