"""Reading finished runs and sweeps: the ablation report's tables, statistics and plots. Nothing imports it."""
