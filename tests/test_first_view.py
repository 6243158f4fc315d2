"""What a user sees first tells the truth: the progress bar ends on the run's final val/loss, run_summary.json
always has a measured tokens_per_sec, continuing a run prints none of Lightning's expected warnings, and a
preemption's line starts on a line of its own."""

from __future__ import annotations

import functools
import json
import re
import warnings
from pathlib import Path

import pytest
import torch
from helpers import ROOT, TINY_MODEL, run_script, run_train, train_in_process

from gptlab.runs.continuation import expected_warnings_silenced

# The bar redrawn every step, validation every 2 steps; the default throughput window (20) never fills.
RUN = [*TINY_MODEL, "data.batch_size=4", "trainer.accelerator=cpu", "trainer.val_check_interval=2",
       "trainer.limit_val_batches=2", "trainer.enable_model_summary=false", "callbacks.progress_bar.refresh_rate=1",
       "callbacks.text_samples.max_new_tokens=4"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """a: 3 steps; b: a continued in its own dir (resume=auto) and SIGTERMed; c: a continued in a new dir (with a
    warmup longer than the run)."""
    root = tmp_path_factory.mktemp("first_view")
    a, c = root / "a", root / "c"
    first = run_train([f"hydra.run.dir={a}", *RUN, "trainer.max_steps=3"], cwd=root, check=True)
    last = a / "checkpoints" / "last.ckpt"
    killed = run_train([f"hydra.run.dir={a}", *RUN, "trainer.max_steps=6", "resume=auto",
                        "+callbacks.kill._target_=helpers.KillAtStep", "+callbacks.kill.step=4",
                        "+callbacks.kill.signal_name=SIGTERM"], cwd=root)
    # b's preemption save rewrote last.ckpt (at step 5, not a's 3), so c trains 2 steps: counting 4 doubled the rate
    # bound below, and the test failed on a busy machine whenever start-up was a small share of c's fit.
    step_of_last = torch.load(last, map_location="cpu", weights_only=False)["global_step"]
    continued = run_train([f"hydra.run.dir={c}", *RUN, "trainer.max_steps=7", f"ckpt_path={last}",
                           "scheduler.warmup_steps=9"], cwd=root, check=True)
    return {"a": (a, first), "b": killed, "c": (c, continued), "resumed_at": step_of_last}


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "run_summary.json").read_text())


def test_the_bar_ends_on_the_final_validation(runs: dict) -> None:
    run_dir, proc = runs["a"]
    shown = re.findall(r"val=(\d+\.\d+)", proc.stderr)
    assert shown, proc.stderr[-2000:]
    final = summary(run_dir)["final_val_loss"]
    assert shown[-1] == f"{final:.3f}"  # validations at steps 2 and 3 (the last): the bar shows step 3's


def test_an_option_without_effect_is_warned_once_in_the_runs_own_log(runs: dict) -> None:
    """c asks for 9 warmup steps in a 7-step run: the lr never reaches its peak (option_relevance's warn row)."""
    run_dir, proc = runs["c"]
    shown = proc.stdout + proc.stderr  # Hydra's job log writes to stdout
    lines = [line for line in shown.splitlines() if "scheduler.warmup_steps=9 never ends" in line]
    assert len(lines) == 1 and "[HYDRA]" not in lines[0] and "WARNING" in lines[0], shown
    assert "scheduler.warmup_steps=9 never ends" in (run_dir / "train.log").read_text()


def test_tokens_per_sec_is_measured_for_short_and_continued_runs(runs: dict) -> None:
    for key, steps in (("a", 3), ("c", 7 - runs["resumed_at"])):
        values = summary(runs[key][0])
        rate = values["tokens_per_sec"]
        assert isinstance(rate, float) and rate > 0, (key, values)
        # Training seconds exclude validation and start-up, so the rate is at least the whole fit's average.
        assert rate >= steps * values["tokens_per_step"] / values["fit_seconds"], (key, values)


def test_continuing_prints_no_expected_lightning_warnings(runs: dict) -> None:
    killed, continued = runs["b"], runs["c"][1]
    assert "exists and is not empty" not in killed.stderr, killed.stderr[-3000:]  # resume=auto in its own dir
    assert "The dirpath has changed" not in continued.stderr, continued.stderr[-3000:]  # ckpt_path, a new dir


def test_the_preempted_line_starts_on_its_own_line(runs: dict) -> None:
    killed = runs["b"]
    assert killed.returncode == 143, killed.stderr[-3000:]
    lines = killed.stderr.split("\n")
    assert any(line.startswith("gptlab: preempted (SIGTERM") for line in lines), killed.stderr[-3000:]
    assert "train:" in killed.stderr  # the bar was there, and was ended before the message


def test_only_the_expected_warnings_are_silenced(tmp_path: Path) -> None:
    here, elsewhere = tmp_path / "run" / "checkpoints", tmp_path / "other" / "checkpoints"
    not_empty = f"Checkpoint directory {here} exists and is not empty."
    moved = (f"The dirpath has changed from '{elsewhere}' to '{here}', therefore `best_model_score` ... won't be "
             "reloaded. Only `best_model_path` will be reloaded.")
    for ckpt, silenced in [(here / "last.ckpt", {not_empty, moved}), (elsewhere / "last.ckpt", {moved}),
                           (None, set())]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with expected_warnings_silenced(None if ckpt is None else str(ckpt), [here]):
                for message in (not_empty, moved, "something else"):
                    warnings.warn(message, UserWarning, stacklevel=1)
        assert {str(w.message) for w in caught} == {not_empty, moved, "something else"} - silenced, ckpt


# The characters each tab's tag comparator (`compareTagNames`, read from TensorBoard 2.21's frontend) sorts before
# all others, as equals; digits are among them, and two digit runs compare as numbers. The Scalars tab counts '_' in:
# there `val_best/loss` sorts before `val/loss`, which left val/ collapsed (issue 33).
BREAKS = {"Time Series": "/", "Scalars": "/_"}
OPEN_GROUPS = 2  # each tab opens its first two: Time Series `slice(0, 2)`, Scalars `index <= 2` after the filter's


def tensorboard_compare(a: str, b: str, breaks: str) -> int:
    """TensorBoard's order of two tags in a tab whose comparator treats `breaks` and digits as the smallest, equal
    characters."""
    number = re.compile(r"\d+(?:\.\d*)?(?:[eE][+-]?\d+)?")  # the run parseFloat reads
    i = j = 0
    while True:
        if i == len(a):
            return 0 if j == len(b) else -1
        if j == len(b):
            return 1
        if a[i] in "0123456789" and b[j] in "0123456789":
            x, y = number.match(a, i), number.match(b, j)
            if float(x.group()) != float(y.group()):
                return -1 if float(x.group()) < float(y.group()) else 1
            i, j = x.end(), y.end()
            continue
        a_breaks, b_breaks = a[i] in breaks or a[i].isdigit(), b[j] in breaks or b[j].isdigit()
        if a_breaks != b_breaks:
            return -1 if a_breaks else 1
        if not a_breaks and a[i] != b[j]:
            return -1 if a[i] < b[j] else 1
        i, j = i + 1, j + 1


def tensorboard_sorted(tags: list[str], tab: str) -> list[str]:
    return sorted(tags, key=functools.cmp_to_key(lambda a, b: tensorboard_compare(a, b, BREAKS[tab])))


def tensorboard_groups(tags: list[str], tab: str) -> list[str]:
    """The tag groups in the order `tab` shows them: a group is the text before a tag's first '/', placed where its
    first tag sorts."""
    return list(dict.fromkeys(tag.split("/", 1)[0] for tag in tensorboard_sorted(tags, tab)))


def test_tensorboard_order_is_the_frontends() -> None:
    """Each case as TensorBoard 2.21 showed it in headless Chromium (scripts/check_tensorboard_view.py)."""
    tags = ["val/ppl", "val_best/loss", "val-best/loss", "val/loss", "val/loss/b", "train/lr"]
    assert tensorboard_sorted(tags, "Time Series") == [
        "train/lr", "val/loss", "val/loss/b", "val/ppl", "val-best/loss", "val_best/loss"]
    assert tensorboard_sorted(tags, "Scalars") == [
        "train/lr", "val_best/loss", "val/loss", "val/loss/b", "val/ppl", "val-best/loss"]
    assert tensorboard_groups(tags, "Scalars") == ["train", "val_best", "val", "val-best"]
    for tab in BREAKS:  # digit runs by value
        assert tensorboard_sorted(["x/block_10", "x/block_9"], tab) == ["x/block_9", "x/block_10"]


def documented_first_groups() -> list[str]:
    """The groups docs/run-outputs.md says TensorBoard opens with, expanded at the top of both tabs."""
    text = " ".join((ROOT / "docs" / "run-outputs.md").read_text().split())  # lines joined as the page renders
    found = re.search(r"opens on the Time Series tab with `(\w+)/` and `(\w+)/` expanded at the top, and so does "
                      r"its Scalars tab", text)
    assert found, "docs/run-outputs.md#tensorboard no longer says which groups TensorBoard opens"
    return list(found.groups())


def test_tensorboard_first_screen_from_the_event_files(tmp_path: Path) -> None:
    """What TensorBoard shows first: train/ and val/ as the two expanded groups of both tabs, no `epoch`, no hp_metric,
    every point at the optimizer steps done (as the bar and the checkpoint names say), the run named by the run's
    name, and HParams values of their own types (a boolean a bool, not 1.0)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2

    from gptlab.runs.run_dir import STEPS_DONE_SUFFIX, event_files

    run = tmp_path / "run"
    train_in_process(run, "trainer.max_steps=4", "trainer.val_check_interval=2",
                     "callbacks.stability_probes.every_n_steps=2")
    (events,) = event_files(run)
    assert events.parent == run / "tensorboard" / "train"  # `tensorboard --logdir <run dir>` lists tensorboard/train
    assert events.name.endswith(STEPS_DONE_SUFFIX)  # what tells the report this file's steps are steps done
    acc = EventAccumulator(str(events), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "epoch" not in tags and "hp_metric" not in tags
    groups = {tab: tensorboard_groups(tags, tab) for tab in BREAKS}
    opened = {tab: shown[:OPEN_GROUPS] for tab, shown in groups.items()}
    assert documented_first_groups() == ["train", "val"]
    assert opened == {tab: documented_first_groups() for tab in BREAKS}, groups  # what each tab opens: the docs' two
    for tab, shown in groups.items():
        assert shown == ["train", "val", "val-best", "x_probes", "x_throughput"], (tab, shown)
        # Three train/ cards: a 1920-pixel screen shows them in one row, and val/ below them.
        assert [t for t in tensorboard_sorted(tags, tab) if t.startswith("train/")] == [
            "train/grad_norm", "train/loss", "train/lr"], tab
    section = (ROOT / "docs" / "run-outputs.md").read_text().split("## TensorBoard", 1)[1]
    assert all(f"`{group}/" in section for group in groups["Scalars"]), groups  # every group is documented
    assert {"train/loss", "train/lr", "x_throughput/tokens_per_sec", "val/loss", "val/bpb"} <= set(tags)

    steps = {tag: [e.step for e in acc.Scalars(tag)] for tag in tags}
    assert steps["val/loss"] == steps["val/bpb"] == steps["val-best/loss"] == [2, 4]
    assert steps["train/loss"] == steps["train/lr"] == [1, 2, 3, 4]  # a step's loss at the count after that step
    assert steps["x_probes/grad_norm/block_0"] == [1, 3]  # probed during steps 1 and 3
    assert [e.step for e in acc.Tensors("samples/0/text_summary")] == [2, 4]
    assert (run / "checkpoints" / "step0000004-val" f"{acc.Scalars('val/loss')[-1].value:.4f}.ckpt").is_file()

    content = acc.PluginTagToContent("hparams")
    session = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    values = session.hparams
    assert values["check_memory"].WhichOneof("kind") == "bool_value" and values["check_memory"].bool_value is True
    # Numbers stay numbers (HParams filters them by interval and sorts them numerically); TensorBoard has no integer
    # type and shows every number with 5 digits (32.000): see docs/run-outputs.md.
    batch_size = values["data.batch_size"]
    assert batch_size.WhichOneof("kind") == "number_value" and batch_size.number_value == 4
    assert values["model.norm"].WhichOneof("kind") == "string_value"
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    types = {info.name: info.type for info in experiment.hparam_infos}
    assert types["check_memory"] == api_pb2.DATA_TYPE_BOOL and types["model.tie_weights"] == api_pb2.DATA_TYPE_BOOL
    assert types["data.batch_size"] == api_pb2.DATA_TYPE_FLOAT64 and types["model.norm"] == api_pb2.DATA_TYPE_STRING
    assert [m.name.tag for m in experiment.metric_infos] == ["val-best/loss", "val-best/bpb"]


def test_eval_is_quiet_and_says_where_eval_json_went(runs: dict) -> None:
    run_dir = runs["a"][0]
    out_dir = run_dir.parent / "eval_out"
    proc = run_script("src/eval.py", [f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}", f"hydra.run.dir={out_dir}",
                                      *[o for o in RUN if o.startswith(("data.", "trainer.limit_val"))],
                                      "trainer.accelerator=cpu"], cwd=run_dir.parent, check=True)
    output = proc.stdout + proc.stderr
    for noise in ("GPU available", "Tip:", "LeafSpec", "Validation", "limit_val_batches=1.0"):
        assert noise not in output, output
    assert f"wrote {out_dir / 'eval.json'}" in output and (out_dir / "eval.json").is_file()
    assert json.loads(proc.stdout.strip().splitlines()[-1])["val/loss"] > 0  # the JSON line stays stdout's last


def test_the_bars_loss_is_train_loss_not_the_objective() -> None:
    """With z-loss or multi-token prediction the objective (what backward takes) is not the cross-entropy that
    train/loss logs; the bar showed the objective (4.1 beside a logged 1.97 in a speedrun_nano run)."""
    import io
    from types import SimpleNamespace

    from tqdm import tqdm

    from gptlab.train.callbacks.progress import StepProgressBar

    bar = StepProgressBar(refresh_rate=1)
    bar._bar = tqdm(total=4, file=io.StringIO())
    trainer = SimpleNamespace(global_step=1, max_steps=4, accumulate_grad_batches=2)
    outputs = {"loss": torch.tensor(4.117 / 2), "train_loss": torch.tensor(1.973)}  # Lightning halves "loss"
    bar.on_train_batch_end(trainer, SimpleNamespace(tokens_per_step=None), outputs)
    assert bar._postfix["loss"] == "1.973"
