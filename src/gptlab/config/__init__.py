"""Typed configs: a schema per config group (dataclasses in Hydra's ConfigStore, so a wrong type or an unknown key
fails while Hydra composes), the ranges and cross-field rules beside the fields (`check`), and Hydra's compose
errors rewritten as one `gptlab: error:` line that names the key meant (`main`).

Importing this package registers the schemas; every entry script that composes conf/ imports it first.
"""

from gptlab.config import fast_path, output_dir
from gptlab.config.store import register

register()
fast_path.register()  # ${gptlab.on_cuda:...}: the GPU fast path's defaults
output_dir.register()  # ${gptlab.output_dir:}: paths.output_dir, also where Hydra runs no job (--cfg job --resolve)
