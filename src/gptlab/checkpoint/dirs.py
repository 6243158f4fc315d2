"""Where a run keeps its checkpoints, named apart from the reader (which imports torch): what checks a path against a
run's checkpoints/ dir (runs.write_targets, runs.one_run) answers without it."""

CHECKPOINTS_DIR = "checkpoints"  # where a run's checkpoint callbacks write (conf/callbacks: <run dir>/checkpoints)
