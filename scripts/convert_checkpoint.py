"""Convert a sharded checkpoint (the folder trainer=fsdp saves) into one file that eval, sample and export read.

    python scripts/convert_checkpoint.py outputs/runs/<name>/<date>/<time>/checkpoints/last.ckpt model.ckpt

eval.py, sample.py and scripts/export_hf.py also read the folder directly; the file drops the optimizer states,
so continue training from the folder (on any number of ranks), not from the file. An existing file is refused
(--overwrite replaces it), and so is any path in a run's checkpoints/.
"""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

from pathlib import Path

from gptlab.launch.arguments import ArgumentParser
from gptlab.launch.cli import user_errors_exit
from gptlab.runs.write_targets import check_new_file


@user_errors_exit
def main() -> None:
    parser = ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint", type=Path, help="a sharded checkpoint folder, or a run dir (its newest)")
    parser.add_argument("out", type=Path, help="the one-file checkpoint to write")
    parser.add_argument("--overwrite", action="store_true", help="replace `out` if it exists")
    args = parser.parse_args()
    check_new_file("out", args.out, args.overwrite, "--overwrite")
    from gptlab.checkpoint.convert import to_one_file

    ckpt = to_one_file(args.checkpoint, args.out)
    n = sum(t.numel() for t in ckpt["state_dict"].values())
    print(f"wrote {args.out} (step {ckpt.get('global_step', 0)}, {len(ckpt['state_dict'])} tensors, {n:,} values)")


if __name__ == "__main__":
    main()
