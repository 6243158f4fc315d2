"""The reports' choices (ablation_report's --x, --band, --test, --correction), apart from the statistics that use
them: the command's argument parsing reads them without importing torch or scipy."""

X_AXES = ("tokens", "flops", "seconds")
BANDS = ("minmax", "std")
TESTS = ("paired", "welch")  # --test: paired where valid (the default), or Welch's on every comparison
CORRECTIONS = ("holm", "none")
