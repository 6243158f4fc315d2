"""The files a training run leaves in its run dir, named once: train/ writes them, eval/ and tools/ read them,
and neither side imports the other for a file name."""

RESOLVED_CONFIG = "config_resolved.yaml"  # the fully resolved config of the run (sample.py rebuilds from it)
SUMMARY_FILE = "run_summary.json"  # what a finished run measured; read by scripts/ablation_report.py
