"""Every command of README.md and of the docs site's pages (docs/*.md), so the docs cannot rot.

Convention (also described in docs/testing.md): commands are the lines of indented code blocks that start with
`python`, `pip`, `tensorboard` or `$ ` (a `$ ` line is followed by the output it must print, and exits 2);
fenced ```python blocks are Python snippets. Any other line of an indented code block must be a `#` comment
(output, trees and diagrams go in fenced ```text blocks), so no command hides where the parser does not look.
A comment line `<!-- readme-test: append k=v ... -->` appends its overrides to every `src/train.py` command
after it in the same file, up to the next such comment. `<run dir>` is replaced by the dir of the README's plain
`python src/train.py` run, `<dir>` by a fresh dir. Commands that cannot run here are listed in NOT_RUNNABLE with
the reason; the 8-GPU commands run in their dry form on a machine with fewer GPUs (they must exit 2 naming
trainer.devices). Nothing is skipped silently: a command that matches no rule runs.

The fast tests classify every command and check the config of every `src/train.py` command in-process, and run
README.md's own commands (less its sweeps) one after another in one checkout, as a new user types them; the
slow one (`pytest -m slow tests/test_readme.py`) runs them all in a fresh copy of the repository: README.md
first, then the pages in the site's nav order (a command whose shell line was already run is run once).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from helpers import CHECKOUT_ENV, HANG_GUARD_S, ROOT, Zygote, compose_config, write_corpus

from gptlab.config.suggest import compose_message
from gptlab.config.validate import check as check_config
from gptlab.errors import ConfigError
from gptlab.preflight import guards

README = ROOT / "README.md"
DOCS = ROOT / "docs"
COMMANDS_BEFORE_THE_SITE = 64  # README.md's commands when it held all the docs (734 lines); none may be lost
MARKER = re.compile(r"<!--\s*readme-test:\s*append\s+(.*?)\s*-->")  # a line of its own (fullmatch)
COMMAND_STARTS = ("python ", "pip ", "tensorboard ", "$ ")

NOT_RUNNABLE = {
    "pip install": "installs packages into the environment (network); CI's own setup runs exactly this",
    "tensorboard --logdir": "starts a server that runs until stopped",
    "hydra/launcher=submitit_slurm": "needs a SLURM cluster",
    "hydra/launcher=local_gpus": "needs GPUs; tests/test_gpu_launcher.py runs the launcher over fake GPU ids",
    "hydra.launcher.address=": "needs a Ray cluster; tests/test_ray_launcher.py runs the launcher on a local instance",
    "data=openwebtext": "streams a dataset from the Hugging Face hub (network)",
    "scripts/bench_": "benchmarks run for minutes on a CPU; each prints ratios measured in one run",
    "from_pretrained(\"path/to/gpt2\")": "needs a real GPT-2 checkpoint from the Hugging Face hub (network)",
    "python -m pytest": "the test suite itself",
    "scripts/measure_doc_times.py": "runs the documented commands for minutes each; tests/test_doc_times.py checks "
                                    "the docs against its record",
    "scripts/fault_drill.py": "kills runs for minutes; tests/test_fault_drill.py runs it (20 kills: -m slow)",
    "scripts/preemption_drill.py": "27 DDP jobs, minutes; tests/test_preemption.py runs five of them (all: -m slow)",
    "tasks=[lambada,hellaswag]": "reads LAMBADA and HellaSwag from the Hugging Face hub (network); "
                                 "tests/test_zeroshot.py runs eval.py on local copies",
    "scripts/campaign.py": "a campaign's loop trains run after run and confirms only what a test claims; "
                           "tests/test_campaign_ledger.py runs its commands on synthetic sweeps, "
                           "scripts/campaign_gallery.sh the whole loop (docs/gallery.md)",
    "data=fineweb_edu": "downloads FineWeb-Edu from the Hugging Face hub (network)",
    "gptlab.eval.lm_eval_adapter": "lm-eval's tasks read their datasets from the Hugging Face hub (network); "
                                   "tests/test_lm_eval_adapter.py runs the command on a local task",
}
DRY_FORM = {"trainer.devices=8": "trainer.devices=8"}  # without 8 GPUs: exit 2 with this in the message


@dataclass
class Command:
    text: str  # as written in the page, comment stripped
    line: int
    source: str = "README.md"  # the page, relative to the repository
    append: list[str] = field(default_factory=list)
    expect_output: str = ""  # for `$ ` examples: the lines shown after the command
    python: bool = False

    @property
    def not_runnable(self) -> str | None:
        return next((reason for key, reason in NOT_RUNNABLE.items() if key in self.text), None)

    @property
    def dry_form(self) -> str | None:
        if guards.gpu_count() >= 8 or "src/train.py" not in self.text:  # plan.py takes devices=8 on any machine
            return None
        return next((needle for key, needle in DRY_FORM.items() if key in self.text), None)

    def shell(self, run_dir: str | None, out_dir: str) -> str:
        text = self.text
        if run_dir is not None:
            text = text.replace("<run dir>", run_dir)
        text = text.replace("<dir>", out_dir)
        text = re.sub(r"(outputs/multiruns/[\w.-]+)/<date>/<time>", lambda m: newest_sweep(m.group(1)), text)
        if self.append and "src/train.py" in text:
            # An appended override under a node the command itself switches off (callbacks.x=null) is dropped.
            nulled = [arg.split("=", 1)[0] + "." for arg in text.split() if arg.endswith("=null")]
            extra = [a for a in self.append if not a.startswith(tuple(nulled))]
            text = f"{text} {' '.join(extra)}"
        return text


def strip_comment(line: str) -> str:
    """Drop a trailing `# comment` that is outside quotes."""
    in_quote = None
    for i, ch in enumerate(line):
        if ch in "'\"" and in_quote in (None, ch):
            in_quote = None if in_quote else ch
        elif ch == "#" and in_quote is None and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def doc_pages() -> list[Path]:
    """README.md, then docs/ in the site's nav order (then any page the nav misses, which test_docs_site fails)."""
    def pages(node) -> list[str]:
        if isinstance(node, str):
            return [node]
        items = node.values() if isinstance(node, dict) else node
        return [page for item in items for page in pages(item)]

    nav = [DOCS / page for page in pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])]
    return [README, *nav, *sorted(set(DOCS.rglob("*.md")) - set(nav))]


@dataclass
class Page:
    commands: list[Command]
    strays: list[str]  # lines of indented code blocks that are neither a command, its output nor a comment


def parse_markdown(text: str, source: str = "README.md") -> Page:
    lines = text.splitlines()
    page = Page([], [])
    append: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        in_code_block = line.startswith("    ") and i > 0 and (not lines[i - 1].strip()
                                                             or lines[i - 1].startswith("    "))
        marker = MARKER.fullmatch(line.strip())
        if marker:
            append = marker.group(1).split()
        elif line.startswith("```"):
            start, body = i + 1, []
            i += 1
            while not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            if line.startswith("```python"):
                page.commands.append(Command("\n".join(body), start + 1, source, python=True))
        elif in_code_block and line.strip().startswith(COMMAND_STARTS):
            stripped = line.strip()
            while stripped.endswith("\\"):  # a continued command
                i += 1
                stripped = stripped[:-1].rstrip() + " " + lines[i].strip()
            if stripped.startswith("$ "):
                shown = []
                while i + 1 < len(lines) and lines[i + 1].startswith("    ") and lines[i + 1].strip()[:1] != "$":
                    i += 1
                    shown.append(lines[i].strip())
                page.commands.append(Command(stripped[2:], i + 1, source, list(append),
                                             expect_output="\n".join(shown)))
            else:
                page.commands.append(Command(strip_comment(stripped), i + 1, source, list(append)))
        elif in_code_block and line.strip() and not line.strip().startswith("#"):
            page.strays.append(f"{source} line {i + 1}: {line.strip()}")
        i += 1
    return page


def parse_readme(text: str | None = None) -> list[Command]:
    """The commands of `text`, or of README.md and every docs page."""
    if text is not None:
        return parse_markdown(text).commands
    return [cmd for page in parse_pages() for cmd in page.commands]


def parse_pages() -> list[Page]:
    return [parse_markdown(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT))) for path in doc_pages()]


def test_parser_convention() -> None:
    sample = """intro
<!-- readme-test: append trainer.max_steps=2 -->

    python src/train.py model=nano   # a comment
    python src/train.py prompt="a # not a comment" \\
        trainer.devices=2
    $ python src/train.py model.norm=x
    gptlab: error: model.norm

```python
print(1)
```
"""
    cmds = parse_readme(sample)
    assert [c.text for c in cmds[:2]] == ["python src/train.py model=nano",
                                          'python src/train.py prompt="a # not a comment" trainer.devices=2']
    assert cmds[0].shell(None, "/o").endswith("model=nano trainer.max_steps=2")
    assert cmds[2].expect_output == "gptlab: error: model.norm" and cmds[3].python and cmds[3].text == "print(1)"
    # A text fence is not read; a line of an indented block that is no command, output or comment is a stray.
    page = parse_markdown("```text\n    python src/train.py\n```\n\n    sbatch run.sh\n    # a comment\n", "x.md")
    assert page.commands == [] and page.strays == ["x.md line 5: sbatch run.sh"]


def test_no_command_hides_from_the_parser() -> None:
    strays = [stray for page in parse_pages() for stray in page.strays]
    assert not strays, "indented code lines that are no command (fence them as ```text):\n" + "\n".join(strays)


def test_no_command_was_lost_when_the_readme_became_a_site() -> None:
    assert len(parse_readme()) >= COMMANDS_BEFORE_THE_SITE


def test_every_training_command_is_capped() -> None:
    """A `src/train.py` command that trains has a readme-test marker before it in its page, so the slow test
    trains a few steps, not a full run or sweep."""
    uncapped = [f"{cmd.source} line {cmd.line}: {cmd.text}" for cmd in parse_readme()
                if "src/train.py" in cmd.text and not cmd.not_runnable and not cmd.expect_output
                and not any(arg.startswith("trainer.max_steps=") for arg in cmd.append)]
    assert not uncapped, "add a <!-- readme-test: append trainer.max_steps=... --> line before:\n" + "\n".join(uncapped)


def train_overrides(cmd: Command) -> list[str]:
    """The overrides of a `src/train.py` command, sweeps reduced to their first value, placeholders filled."""
    args = shlex.split(cmd.shell("/tmp/readme-run", "/tmp/readme-out"))[2:]
    out = []
    for arg in args:
        if arg == "-m" or arg.startswith("hydra"):
            continue
        key, _, value = arg.partition("=")
        if "," in value and not value.startswith("["):
            value = value.split(",")[0]
        out.append(f"{key}={value}")
    return out


def refusal(overrides: list[str]) -> str:
    """The message `python src/train.py overrides` is refused with before training, at compose or by the checks."""
    try:
        cfg = compose_config(overrides, "/tmp/readme-run")
    except Exception as err:
        message = compose_message(err)
        assert message is not None, err
        return message
    with pytest.raises(ConfigError) as err:
        check_config(cfg, overrides)
    return str(err.value)


def test_every_readme_command_is_classified_and_its_config_valid(monkeypatch) -> None:
    commands = parse_readme()
    checked = 0
    for cmd in commands:
        if cmd.not_runnable or cmd.python or not cmd.text.startswith("python src/train.py"):
            continue
        if cmd.expect_output:  # refused by Hydra's typed compose (worded by gptlab.config) or by the checks after it
            assert cmd.expect_output.removeprefix("gptlab: error: ") == refusal(train_overrides(cmd)), cmd.text
            continue
        cfg = compose_config(train_overrides(cmd), "/tmp/readme-run")
        check_config(cfg)
        if cmd.dry_form:
            with pytest.raises(ConfigError, match=re.escape(cmd.dry_form)):
                guards.check_devices(cfg.trainer)
        checked += 1
    assert checked >= 15


def test_the_sample_commands_prompt_reaches_the_model_with_its_spaces() -> None:
    """The shell's quoting, then Hydra's (which trims an unquoted value): `prompt="The "` gave the model "The"."""
    from gptlab.eval.sampling import read_prompt

    samples = [cmd for cmd in parse_readme() if cmd.text.startswith("python src/sample.py") and "prompt=" in cmd.text]
    assert samples
    for cmd in samples:
        args = shlex.split(cmd.shell("/tmp/readme-run", "/tmp/readme-out"))[2:]  # as bash hands them over
        written = re.search(r"""prompt='"(.*?)"'""", cmd.text)
        assert written is not None, f"{cmd.source} line {cmd.line}: quote the prompt twice, prompt='\"...\"'"
        assert read_prompt(compose_config(args, config_name="sample")) == written.group(1), cmd.text


def fresh_checkout(tmp: Path, gpt2_ranks: Path) -> Path:
    """The tracked files of this checkout, as a new clone would have them, plus the files the README's commands
    read: GPT-2's ranks where fetch_gpt2_ranks.py would have put them, my/*.jsonl and prompt.txt."""
    repo = tmp / "gptlab"
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout.split()
    for name in listed:
        if (ROOT / name).is_file() and not name.startswith(("tests/", "outputs/")):
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, repo / name)
    (repo / "data" / "cache" / "tiktoken").mkdir(parents=True, exist_ok=True)
    shutil.copy(gpt2_ranks, repo / "data" / "cache" / "tiktoken" / "gpt2.tiktoken")
    write_corpus(repo / "my")
    (repo / "prompt.txt").write_text("The ", encoding="utf-8")
    return repo


def newest_sweep(pattern: str) -> str:
    """`outputs/multiruns/<name>`'s newest sweep dir (relative to the launch dir, which is the repo copy)."""
    sweeps = sorted(Path(".").glob(f"{pattern}/*/*"), key=lambda p: p.stat().st_mtime_ns)
    return str(sweeps[-1]) if sweeps else f"{pattern}/<date>/<time>"


def newest_run(repo: Path) -> str | None:
    runs = [p.parent.parent for p in (repo / "outputs" / "runs").rglob("checkpoints/last.ckpt")]
    return str(max(runs, key=lambda p: p.stat().st_mtime_ns)) if runs else None


def run_in_order(commands: list[Command], repo: Path, out_dir: str) -> list[str]:
    """Run `commands` one after another in the one checkout `repo` (the launch dir), as a user types them; each
    sees what the ones before it left. Returns a failure text per command that did not do what its page says."""
    env = {**CHECKOUT_ENV, "PYTHONPATH": str(repo / "src")}
    zygote = Zygote(repo, env)  # the copy's gptlab imported once; each plain `python <script> ...` is a fork of it
    try:
        return _run_in_order(commands, repo, out_dir, env, zygote)
    finally:
        zygote.close()


def _run_in_order(commands: list[Command], repo: Path, out_dir: str, env: dict[str, str], zygote: Zygote) -> list[str]:
    failures: list[str] = []
    already_run: dict[str, str] = {}  # a shell line run before (the README repeats some pages' commands)
    plain_run: str | None = None  # <run dir>: the dir of the plain `python src/train.py` run
    for cmd in commands:
        where = f"{cmd.source} line {cmd.line}"
        if cmd.not_runnable:
            print(f"not run  {where}: {cmd.text[:70]}: {cmd.not_runnable}", flush=True)
            continue
        shell = cmd.text if cmd.python else cmd.shell(plain_run, out_dir)
        if shell in already_run:
            print(f"ran      {where}: {cmd.text[:70]} (as {already_run[shell]})", flush=True)
            continue
        already_run[shell] = where
        before = {p for p in repo.rglob("*")}
        if cmd.python:
            proc = subprocess.run([sys.executable, "-c", cmd.text], cwd=repo, env=env, capture_output=True, text=True,
                                  timeout=HANG_GUARD_S)
        else:
            try:
                if zygote.usable() and shell.startswith("python ") and not re.search(r"[|&;<>$`()\\]", shell):
                    proc = zygote.run([sys.executable, *shlex.split(shell)[1:]], repo, env)  # the argv bash passes
                else:
                    proc = subprocess.run(["bash", "-c", shell.replace("python ", f"{sys.executable} ", 1)],
                                          cwd=repo, env=env, capture_output=True, text=True, timeout=HANG_GUARD_S)
            except subprocess.TimeoutExpired:
                print(f"TIMEOUT  {where}: {cmd.text[:70]}", flush=True)
                failures.append(f"{where}: {cmd.text}\ntook over {HANG_GUARD_S} s")
                continue
        output = proc.stdout + proc.stderr
        if cmd.text == "python src/train.py" and plain_run is None:
            plain_run = newest_run(repo)
        expected_rc = 2 if (cmd.expect_output or cmd.dry_form) else 0
        ok = proc.returncode == expected_rc and "Traceback" not in output
        if cmd.expect_output:
            ok = ok and cmd.expect_output in output
        if cmd.dry_form:
            ok = ok and cmd.dry_form in output
        if " -m " in cmd.text and not cmd.dry_form:
            ok = ok and output.count("gptlab: sweep dir") == 1 and "sweep finished" in output
        if "debug=fast_dev_run" in cmd.text:
            ok = ok and {p for p in repo.rglob("*") if "__pycache__" not in p.parts} <= before
        print(f"{'ok' if ok else 'FAILED':<8} {where}: {cmd.text[:70]} (exit {proc.returncode})", flush=True)
        if not ok:
            failures.append(f"{where}: {cmd.text}\nexit {proc.returncode}\n{output[-3000:]}")
    return failures


def readme_in_order() -> list[Command]:
    """README.md's own commands in its order, less its sweeps and the report that reads one (the slow test below
    runs those, in the same order): what a new user types first, at the cost of a few short runs."""
    commands = parse_markdown(README.read_text(encoding="utf-8")).commands
    return [cmd for cmd in commands if " -m " not in cmd.text and "outputs/multiruns/" not in cmd.text]


def test_readme_commands_run_in_the_readme_order(tmp_path, gpt2_ranks, monkeypatch) -> None:
    """One checkout for all of them: fast_dev_run after a training run must run (and write nothing), eval and
    sample read the run's checkpoint, and resume=auto continues that run in its dir."""
    commands = readme_in_order()
    texts = [cmd.text for cmd in commands]
    assert texts.index("python src/train.py") < texts.index("python src/train.py debug=fast_dev_run")
    repo = fresh_checkout(tmp_path, gpt2_ranks)
    monkeypatch.chdir(repo)
    failures = run_in_order(commands, repo, str(tmp_path / "hf"))
    assert not failures, "\n\n".join(failures)


@pytest.mark.slow
def test_every_readme_command_runs(tmp_path, gpt2_ranks, monkeypatch) -> None:
    repo = fresh_checkout(tmp_path, gpt2_ranks)
    monkeypatch.chdir(repo)  # placeholders such as <date>/<time> are looked up relative to the launch dir
    failures = run_in_order(parse_readme(), repo, str(tmp_path / "hf"))
    assert not failures, "\n\n".join(failures)
