"""Decode tokens/s: GPT.generate with the KV cache, without it, and transformers' generate (conf/bench_generate.yaml).

    python scripts/bench_generate.py                       # gpt2_small (12 layers), 512 new tokens
    python scripts/bench_generate.py model.n_layer=2       # a quick look on a CPU
    python scripts/bench_generate.py device=cuda
"""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

from omegaconf import DictConfig

from gptlab.config.entry import main as gptlab_main
from gptlab.launch.cli import user_errors_exit
from gptlab.tools.benchmarks.generate import report, run


@gptlab_main(config_name="bench_generate")
@user_errors_exit
def main(cfg: DictConfig) -> None:
    print(report(cfg, run(cfg)))


if __name__ == "__main__":
    main()
