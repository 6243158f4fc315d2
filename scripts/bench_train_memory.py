"""Peak memory of short CPU training runs against train's memory check: one markdown row per config.

Each argument is one config, its overrides separated by spaces, e.g.
    python scripts/bench_train_memory.py "trainer.accelerator=cpu" \
        "model=gpt2_small trainer=ddp trainer.accelerator=cpu trainer.devices=2 data.batch_size=1 model.block_size=256"
Runs each for 3 steps with check_memory=false; see gptlab.tools.benchmarks.train_memory for what is measured.
Linux only. Mind the machine's RAM: the check is off, so a config too large for it meets the OOM killer.
"""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import sys

from gptlab.tools.benchmarks.train_memory import main

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 else 2)
    main([arg.split() for arg in sys.argv[1:]])
