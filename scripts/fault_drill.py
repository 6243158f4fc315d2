"""Kill a training run N times at random steps (a share of them while a checkpoint is being written), resume it
each time with resume=auto, and compare train/loss at every step with a run that was never interrupted.

    python scripts/fault_drill.py                      # 20 kills, seed 0 (~5 min on a 2-core CPU)
    python scripts/fault_drill.py --kills 5 --seed 3
    python scripts/fault_drill.py --tmpdir /scratch/x  # $TMPDIR for the runs, when the drill cannot arrange one
                                                       # on another filesystem than the run dir itself

Prints kills, resumes, lost steps, leaked temp files and whether the losses are bit-identical; exits 1 unless
every kill resumed, nothing leaked and every step's loss equals the reference's bit for bit.
"""

from __future__ import annotations

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import sys

from gptlab.launch.arguments import number, positive_int, seed, writable_dir
from gptlab.tools.drill_cli import drill_parser


def main() -> None:
    parser = drill_parser(__doc__)
    parser.add_argument("--kills", type=positive_int, default=20, help="SIGKILLs before the run may finish")
    parser.add_argument("--seed", type=seed, default=0, help="seeds the kill moments and the training run")
    parser.add_argument("--aimed", type=number(0.0, 1.0), default=0.4, help="share of kills aimed at checkpoint writes")
    parser.add_argument("--steps", type=positive_int.e_g("200"), default=None,
                        help="training steps (default: enough for the kills)")
    parser.add_argument("--checkpoint-every", type=positive_int, default=4, help="optimizer steps between checkpoints")
    parser.add_argument("--tmpdir", type=writable_dir, default=None,
                        help="$TMPDIR of the runs (default: a tmpfs mounted as root, else /dev/shm)")
    args = parser.parse_args()
    from gptlab.tools.fault_drill import run_drill

    result, seconds = run_drill(args.kills, args.seed, args.steps, args.checkpoint_every, args.aimed, args.workdir,
                                args.tmpdir, args.keep)
    print(result.table(seconds))
    sys.exit(0 if result.passed else 1)


if __name__ == "__main__":
    main()
