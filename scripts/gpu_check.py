"""Every open GPU figure in one command: pytest -m gpu, bench_train's step, fit and typed rows, gpt3_xl under FSDP,
float8's parity and speed, bench_attention's kernels, the fused sweep's rows once they exist, and the doctor.

    python3 scripts/gpu_check.py                      # on one CUDA GPU: each part under its own limit, 9 min in all
    python scripts/gpu_check.py --device cpu --tiny   # the same parts at toy sizes on a CPU (CI runs it)
    python scripts/gpu_check.py --prepare             # here, with network: the wheels and ranks to carry

Writes one markdown table per part (machine, torch, date) to $OUT/gpu_check.md (else outputs/gpu_check/), the
parts' output to gpu_check.log, and prints a short summary last; exits 1 when a part failed. docs/benchmarks.md
gives the device command line (gptlab.tools.gpu_check).
"""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import sys

from gptlab.tools.gpu_check.runner import main

if __name__ == "__main__":
    sys.exit(main())
