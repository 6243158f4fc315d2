"""muP's coordinate check: per-layer activation RMS after a few Adam steps across widths, standard against mup.

    python scripts/coord_check.py [--widths 64 128 256 512 1024] [--steps 3] [--lr 3e-3] [--out coord_check.png]

Prints, per layer, the slope of log RMS against log width (0 = flat, what muP promises; the standard
parametrization's hidden outputs and logits grow) and writes the plot. 2 blocks, n_head 4, 32-token windows of the
built-in pydocs corpus (bytes), AdamW without weight decay, mup's base width = the smallest width. An existing
--out is refused before anything is computed (--overwrite replaces it).
"""

from __future__ import annotations

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

from pathlib import Path

from gptlab.fields import must
from gptlab.launch.arguments import Arg, ArgumentParser, positive_int, positive_number, writable_file
from gptlab.launch.cli import user_errors_exit
from gptlab.runs.write_targets import check_new_file

# n_embd split over the 4 heads (gptlab.tools.coord_check.CoordSetup.n_head)
WIDTH = Arg(int, must(lambda v: isinstance(v, int) and v >= 4 and v % 4 == 0, "a multiple of 4 (n_head is 4), e.g. 64",
                      number=True))


@user_errors_exit
def main() -> None:
    parser = ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--widths", type=WIDTH, nargs="+", default=[64, 128, 256, 512, 1024], help="n_embd values")
    parser.add_argument("--steps", type=positive_int, default=3, help="Adam steps before measuring")
    parser.add_argument("--lr", type=positive_number, default=3e-3, help="Adam's lr (mup's hidden matrices get lr / r)")
    parser.add_argument("--seeds", type=positive_int, default=2, help="seeds averaged (geometric mean) per width")
    parser.add_argument("--out", type=writable_file, default=Path("coord_check.png"), help="where the plot goes")
    parser.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    args = parser.parse_args()
    if len(set(args.widths)) < 2:
        parser.refuse(f"--widths {' '.join(map(str, args.widths))}: a slope needs at least two widths, e.g. "
                      "--widths 64 128 256.")
    check_new_file("--out", args.out, args.overwrite, "--overwrite")
    from gptlab.tools.coord_check import CoordSetup, coord_check, plot, slopes

    widths = sorted(set(args.widths))
    setup = CoordSetup(widths=tuple(widths), base_width=widths[0], steps=args.steps, lr=args.lr,
                       seeds=tuple(range(args.seeds)))
    tables = {name: coord_check(setup, name) for name in ("standard", "mup")}
    fitted = {name: slopes(widths, table) for name, table in tables.items()}
    print(f"slope of log RMS vs log width, widths {widths}, after {args.steps} Adam steps at lr {args.lr}")
    print(f"{'layer':<14}{'standard':>10}{'mup':>10}")
    for layer in fitted["standard"]:
        print(f"{layer:<14}{fitted['standard'][layer]:>10.2f}{fitted['mup'][layer]:>10.2f}")
    plot(widths, tables, f"RMS after {args.steps} Adam steps", args.out)
    print(f"plot: {args.out}")


if __name__ == "__main__":
    main()
