"""Peak memory of short CPU training runs against train's memory check: one markdown row per config.

Each argument is one config, its overrides separated by spaces, e.g.
    python scripts/bench_train_memory.py "trainer.accelerator=cpu" \
        "model=gpt2_small trainer=ddp trainer.accelerator=cpu trainer.devices=2 data.batch_size=1 model.block_size=256"
Runs each for 3 steps with check_memory=false; see gptlab.tools.benchmarks.train_memory for what is measured.
Linux only. Mind the machine's RAM: the check is off, so a config too large for it meets the OOM killer.
"""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import argparse

from gptlab.launch.arguments import ArgumentParser
from gptlab.launch.cli import user_errors_exit


@user_errors_exit
def main() -> None:
    parser = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="+", help="one config per argument: its overrides of conf/train.yaml, "
                        "separated by spaces (quote each config)")
    configs = [config.split() for config in parser.parse_args().configs]
    if not all(configs) or not all("=" in word or word.startswith("~") for words in configs for word in words):
        parser.refuse(f"{parser.parse_args().configs!r}: give each config as its train.py overrides (key=value), "
                      "e.g. \"trainer.accelerator=cpu model=nano\".")
    from gptlab.tools.benchmarks.train_memory import main as run

    run(configs)


if __name__ == "__main__":
    main()
