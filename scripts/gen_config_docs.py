"""Write docs/reference/configuration.md from the config schemas (gptlab.config): `python scripts/gen_config_docs.py`.
`--check` exits 1 when the committed page differs from what the schemas give (tests/test_config_schemas.py runs it)."""

import gptlab.on_start  # noqa: F401, I001  (first: Ctrl-C or SIGTERM is one line from here on)

# isort: split

import sys
from pathlib import Path

from gptlab.atomic import atomic_write_text
from gptlab.launch.arguments import ArgumentParser

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "configuration.md"


def main() -> int:
    parser = ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args()
    from gptlab.config.reference import page

    text = page()
    if args.check:
        same = PAGE.exists() and PAGE.read_text(encoding="utf-8") == text
        if not same:
            print(f"{PAGE} is out of date: run python scripts/gen_config_docs.py", file=sys.stderr)
        return 0 if same else 1
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(PAGE, text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
