"""How a run is started: the entry scripts' error handling, Hydra's callbacks and the run-dir guard, DDP's rank
launch and watcher, the local GPU launcher for sweeps, and third-party console noise filtered at its source."""
