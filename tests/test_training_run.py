"""One tiny training run, read back: the TensorBoard scalars, text samples and HParams entry it wrote, and
`src/eval.py` on its checkpoint reproducing its last val/loss."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from helpers import TINY, compose_tiny, run_script, scalars, train_in_process
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from gptlab.execution.checkpointing import hardware_flops_per_token
from gptlab.model import training_flops_per_token
from gptlab.preflight.early_checks import build_model_config
from gptlab.runs.run_dir import event_files

PEAK_FLOPS = 1e12  # the override a user sets for a device gptlab's table lacks: here the CPU, so the MFU path runs
RUN = ["trainer.max_steps=10", "trainer.val_check_interval=5", "global_batch_tokens=256",  # 2 x 4 x 32
       f"callbacks.throughput.peak_flops={PEAK_FLOPS}", "runtime.activation_checkpointing=true"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("run")
    best = train_in_process(run, *RUN)
    assert best is not None and math.isfinite(best)
    return run


def _events(run_dir: Path) -> EventAccumulator:
    (path,) = event_files(run_dir)
    assert path.parent == run_dir / "tensorboard" / "train"  # a single run's events, named for TensorBoard by its name
    acc = EventAccumulator(str(path), size_guidance={"tensors": 0})
    acc.Reload()
    return acc


def test_scalars_are_logged(run_dir: Path) -> None:
    logged = scalars(run_dir)
    expected = {"train/loss", "val/loss", "val/ppl", "train/lr", "train/grad_norm", "x_throughput/tokens_seen",
                "x_throughput/tokens_per_sec", "x_throughput/mfu", "x_throughput/hfu", "val-best/loss", "val/bpb",
                "val-best/bpb"}
    assert expected <= set(logged)
    # MFU = model FLOPs per second / peak; tokens/s and MFU come from the same window.
    flops_per_token = training_flops_per_token(build_model_config(compose_tiny(run_dir, *RUN).model, 257))["total"]
    # HFU counts what full activation checkpointing recomputes too: one more forward of the blocks.
    hardware = hardware_flops_per_token(build_model_config(compose_tiny(run_dir, *RUN).model, 257), "full")
    assert hardware > flops_per_token
    for step, mfu in logged["x_throughput/mfu"].items():
        tokens_per_sec = logged["x_throughput/tokens_per_sec"][step]
        assert mfu == pytest.approx(tokens_per_sec * flops_per_token / PEAK_FLOPS, rel=1e-4)
        assert logged["x_throughput/hfu"][step] == pytest.approx(tokens_per_sec * hardware / PEAK_FLOPS, rel=1e-4)
    assert sorted(logged["train/loss"]) == list(range(1, 11))  # one per optimizer step, at the steps done
    # 2 micro-batches of 4 x 32 tokens accumulated per step (derived from global_batch_tokens=256).
    assert logged["x_throughput/tokens_seen"][10] == 10 * 256
    for step, loss in logged["val/loss"].items():
        assert logged["val/ppl"][step] == pytest.approx(math.exp(loss), rel=1e-5)
    assert logged["val-best/loss"][10] == pytest.approx(min(logged["val/loss"].values()))
    assert all(v > 0 for v in logged["train/grad_norm"].values())
    assert logged["train/lr"][1] < logged["train/lr"][10]  # still warming up (30 warmup steps)


def test_text_samples_and_hparams(run_dir: Path) -> None:
    acc = _events(run_dir)
    texts = [t for t in acc.Tags()["tensors"] if t.startswith("samples/")]
    assert texts == ["samples/0/text_summary", "samples/1/text_summary"]
    events = acc.Tensors("samples/1/text_summary")
    assert [e.step for e in events] == [5, 10]
    assert events[0].tensor_proto.string_val[0].decode().startswith("    The ")  # the prompt, continued

    content = acc.PluginTagToContent("hparams")
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    assert [m.name.tag for m in experiment.metric_infos] == ["val-best/loss", "val-best/bpb"]
    hparams = {h.name for h in experiment.hparam_infos}
    expected = {"model.n_layer", "optimizer.lr", "optimizer._target_", "scheduler.warmup_steps", "data.batch_size"}
    assert expected <= hparams


def test_eval_script_reproduces_the_last_val_loss(run_dir: Path, tmp_path: Path) -> None:
    last_val = scalars(run_dir)["val/loss"][10]  # the validation at the end, same weights as last.ckpt
    overrides = [f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}", f"hydra.run.dir={tmp_path}"]
    overrides += [o for o in TINY if o.startswith(("data.", "trainer.limit_val_batches", "trainer.accelerator"))]
    proc = run_script("src/eval.py", overrides)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["val/loss"] == pytest.approx(last_val, rel=1e-6, abs=1e-6)
    assert result["val/ppl"] == pytest.approx(math.exp(last_val), rel=1e-5)
    assert result["val/bpb"] == pytest.approx(scalars(run_dir)["val/bpb"][10], rel=1e-5)
    assert json.loads((tmp_path / "eval.json").read_text())["val/loss"] == result["val/loss"]
    assert json.loads((tmp_path / "eval.json").read_text())["val/bpb"] == result["val/bpb"]


def test_val_bpb_counts_the_bytes_of_the_evaluated_targets(run_dir: Path) -> None:
    """limit_val_batches=2: the bytes are those of the first 2 batches' targets (end-of-text: 0 bytes),
    not of the whole validation text; run_summary.json has the values at the best and at the final val/loss."""
    import hydra

    cfg = compose_tiny(run_dir, *RUN)
    tokenizer = hydra.utils.instantiate(cfg.tokenizer)
    datamodule = hydra.utils.instantiate(cfg.data, tokenizer=tokenizer)
    datamodule.store.setup(None)
    windows = cfg.trainer.limit_val_batches * cfg.data.batch_size
    targets = torch.cat([datamodule.store.val_set[i][1] for i in range(windows)])
    assert len(datamodule.store.val_set) > windows  # validation really evaluates a subset
    n_bytes = int((targets != tokenizer.eot_id).sum())
    logged = scalars(run_dir)
    for step, loss in logged["val/loss"].items():
        assert logged["val/bpb"][step] == pytest.approx(loss * len(targets) / (math.log(2) * n_bytes), rel=1e-5)
    summary = json.loads((run_dir / "run_summary.json").read_text())
    best_step = min(logged["val/loss"], key=logged["val/loss"].get)
    assert summary["best_val_bpb"] == pytest.approx(logged["val/bpb"][best_step], rel=1e-6)
    assert summary["final_val_bpb"] == pytest.approx(logged["val/bpb"][10], rel=1e-6)
    assert logged["val-best/bpb"][10] == pytest.approx(summary["best_val_bpb"], rel=1e-6)


def test_the_last_step_is_logged_whatever_log_every_n_steps(tmp_path) -> None:
    """A 3-step run under the default log_every_n_steps=10 logged no train/ or x_throughput/ scalar at all."""
    from helpers import TINY_RUN, scalars, train_in_process

    train_in_process(tmp_path / "run", *TINY_RUN, "trainer.max_steps=3", "trainer.limit_val_batches=2",
                     "trainer.log_every_n_steps=10", "callbacks.text_samples.max_new_tokens=4")
    logged = scalars(tmp_path / "run")
    for tag in ("train/loss", "train/lr", "x_throughput/tokens_seen"):
        assert tag in logged and max(logged[tag]) == 3, (tag, sorted(logged))
