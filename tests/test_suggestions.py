"""Every way out a machine or run-dir refusal offers works when followed: the suggested overrides are applied to the
refused command and the same check runs again; it passes, or refuses with a new, true message whose own way out is
followed in turn (more GPUs than present -> a CPU DDP test -> too little RAM -> the data.batch_size that fits).
In-process: the checks are the ones train's launcher runs (gptlab.preflight.guards, gptlab.runs.resume)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import compose_config
from omegaconf import OmegaConf

from gptlab.config.schemas import Runtime
from gptlab.errors import ConfigError
from gptlab.model import GPTConfig
from gptlab.preflight import guards

GB = 1e9
SUGGESTION = re.compile(r"(?<![\w.])((?:trainer|data|runtime|resume)[\w.]*=[\w.-]+)")


def suggested(message: str, command: list[str] = ()) -> list[str]:
    """The overrides a refusal tells the user to type, e.g. ['trainer=ddp', 'trainer.devices=2'], less those of the
    refused command that it names back; those in a `quoted command` are typed together (ways())."""
    return [s.rstrip(".") for s in SUGGESTION.findall(re.sub(r"`[^`]*`", "", message)) if s.rstrip(".") not in command]


def ways(message: str) -> list[list[str]]:
    """Each way out as the overrides typed for it: a `quoted command` is one way, any other override one each."""
    return [span.split() for span in re.findall(r"`([^`]*)`", message)] + [[s] for s in suggested(message)]


def follow(overrides: list[str], suggestion: list[str]) -> list[str]:
    """The command with the suggestion typed in: a suggested key replaces the same key given before."""
    keys = {s.split("=", 1)[0] for s in suggestion}
    return [o for o in overrides if o.split("=", 1)[0] not in keys] + suggestion


def machine_checks(overrides: list[str], free: float) -> None:
    """train's launcher checks against the machine (early_checks' order): devices, then memory."""
    cfg = compose_config(overrides, Path("/tmp/suggestions-run"))
    guards.check_devices(cfg.trainer)
    model_cfg = GPTConfig.for_tokenizer(OmegaConf.to_container(cfg.model, resolve=True), 256)
    runtime = Runtime(**OmegaConf.to_container(cfg.get("runtime", {}), resolve=True))
    guards.check_memory(model_cfg, cfg.data.batch_size, cfg.trainer, free=free, runtime=runtime)


def refusal(overrides: list[str], free: float) -> str | None:
    try:
        machine_checks(overrides, free)
    except ConfigError as err:
        return str(err)
    return None


@pytest.fixture
def two_cores_no_gpu(monkeypatch):
    monkeypatch.setattr(guards, "gpu_count", lambda: 0)
    monkeypatch.setattr(guards.os, "cpu_count", lambda: 2)


def test_the_eight_gpu_refusal_leads_by_its_suggestions_to_a_run_that_fits(two_cores_no_gpu) -> None:
    """The README's 8-GPU command on a CPU machine: its suggested CPU DDP test is refused for memory (a new, true
    message), whose suggested data.batch_size then passes."""
    command = ["model=gpt2_small", "trainer=ddp", "trainer.devices=8"]
    first = refusal(command, free=24 * GB)
    assert first is not None and "trainer.devices=8" in first
    command = follow(command, ["trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"])
    assert "`trainer=ddp trainer.accelerator=cpu trainer.devices=2`" in first
    second = refusal(command, free=24 * GB)
    assert second is not None and second != first and "free RAM is 24.0 GB" in second
    batch = [s for s in suggested(second) if s.startswith("data.batch_size=")]
    assert len(batch) == 1
    assert refusal(follow(command, batch), free=24 * GB) is None


@pytest.mark.parametrize("gpus,cores,command", [
    (2, 2, ["trainer.accelerator=gpu", "trainer.devices=8"]),  # more GPUs than present: the count there is
    (0, 2, ["trainer.accelerator=cpu", "trainer=ddp", "trainer.devices=16"]),  # more CPU ranks than cores
])
def test_the_device_refusals_suggestion_passes_the_device_check(monkeypatch, gpus, cores, command) -> None:
    monkeypatch.setattr(guards, "gpu_count", lambda: gpus)
    monkeypatch.setattr(guards.os, "cpu_count", lambda: cores)
    with pytest.raises(ConfigError) as err:
        guards.check_devices(compose_config(command, Path("/tmp/x")).trainer)
    devices = [s for s in suggested(str(err.value), command) if s.startswith("trainer.devices=")]
    assert devices, str(err.value)
    guards.check_devices(compose_config(follow(command, devices[:1]), Path("/tmp/x")).trainer)


# trainer=fsdp is offered on GPUs only, with the GPU count that makes the run fit (tests/test_guards.py follows it):
# on CPU ranks the activations dominate, which sharding does not divide.
@pytest.mark.parametrize("knob", ["data.batch_size", "runtime.activation_checkpointing"])
def test_each_memory_knob_passes_or_is_refused_anew(two_cores_no_gpu, knob) -> None:
    """Every knob the memory refusal names, typed in: the check passes, or it refuses with other numbers (the
    knob helped, not enough) or for another reason; it never repeats the same refusal."""
    command = ["model=gpt2_small", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"]
    first = refusal(command, free=40 * GB)
    assert first is not None
    chosen = [way for way in ways(first) if knob in {s.split("=", 1)[0] for s in way}]
    assert chosen, first
    again = refusal(follow(command, chosen[0]), free=40 * GB)
    assert again != first
    if knob == "data.batch_size":
        assert again is None


def test_the_run_dir_refusals_ways_out_work(tmp_path: Path) -> None:
    """A new run into a dir with checkpoints: resume=auto (here refused anew: the checkpoint does not load, and that
    message's resume=restart then runs), resume=restart, or another hydra.run.dir."""
    from gptlab.runs.resume import resume_checkpoint

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError) as err:
        resume_checkpoint(compose_config([], run_dir), run_dir)
    ways = suggested(str(err.value))
    assert {"resume=auto", "resume=restart"} <= set(ways) and "hydra.run.dir" in str(err.value)
    with pytest.raises(ConfigError) as auto:
        resume_checkpoint(compose_config(["resume=auto"], run_dir), run_dir)
    assert "can be continued" in str(auto.value) and "resume=restart" in suggested(str(auto.value))
    assert resume_checkpoint(compose_config(["resume=restart"], run_dir), run_dir) is None
    assert resume_checkpoint(compose_config([], tmp_path / "new"), tmp_path / "new") is None
