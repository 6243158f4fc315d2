"""Typed configs: a schema per config group (dataclasses in Hydra's ConfigStore, so a wrong type or an unknown key
fails while Hydra composes), the ranges and cross-field rules beside the fields (`check`), and Hydra's compose
errors rewritten as one `gptlab: error:` line that names the key meant (`main`).

Importing this package registers the schemas; every entry script that composes conf/ imports it first.
"""

import warnings

from gptlab.config import fast_path, output_dir
from gptlab.config.store import register

# Two of conf/'s files extend a plugin's config of the same name on purpose, and Hydra warns about the name match
# at every compose: hydra/launcher/submitit_slurm.yaml (devices and nodes as SLURM tasks) and hydra/sweeper/basic.yaml
# (each sweep job composed once, gptlab/launch/compose_once.py).
# (?s): the message starts with a newline, which `.` does not match without it
warnings.filterwarnings("ignore", message="(?s).*validated against ConfigStore schema with the same name")

register()
fast_path.register()  # ${gptlab.on_cuda:...}: the GPU fast path's defaults
output_dir.register()  # ${gptlab.output_dir:}: paths.output_dir, also where Hydra runs no job (--cfg job --resolve)
