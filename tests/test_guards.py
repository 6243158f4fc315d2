"""Device and memory guards (GPU count and free memory mocked), and the mission's own command on this machine."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers import compose_config, run_train

from gptlab.errors import ConfigError
from gptlab.model import GPTConfig
from gptlab.preflight import guards
from gptlab.preflight.batch_fit import MEMORY_MARGIN, Batching
from gptlab.preflight.guards import check_devices, check_memory, estimate_memory
from gptlab.preflight.planning import activation_bytes

GB = 1e9


def trainer_cfg(*overrides: str):
    return compose_config(list(overrides), "/tmp/unused").trainer


def test_more_gpus_than_present_names_devices_and_what_to_type(monkeypatch) -> None:
    monkeypatch.setattr(guards, "gpu_count", lambda: 0)
    with pytest.raises(ConfigError) as err:
        check_devices(trainer_cfg("trainer.devices=8"))  # accelerator=auto: Lightning would start 8 CPU ranks
    message = str(err.value)
    assert "trainer.devices=8" in message and "none" in message
    assert "trainer=ddp trainer.accelerator=cpu trainer.devices=2" in message
    with pytest.raises(ConfigError, match="trainer.devices=1 asks for 1 GPUs but this machine has none"):
        check_devices(trainer_cfg("trainer=gpu"))
    monkeypatch.setattr(guards, "gpu_count", lambda: 2)
    with pytest.raises(ConfigError, match=r"trainer.devices=8 asks for 8 GPUs but this machine has 2.*devices=2"):
        check_devices(trainer_cfg("trainer=ddp", "trainer.devices=8", "trainer.accelerator=gpu"))


def test_what_the_machine_has_passes(monkeypatch) -> None:
    monkeypatch.setattr(guards, "gpu_count", lambda: 8)
    check_devices(trainer_cfg("trainer=ddp", "trainer.devices=8", "trainer.accelerator=gpu"))
    monkeypatch.setattr(guards, "gpu_count", lambda: 0)
    check_devices(trainer_cfg())  # one device, auto: the CPU
    check_devices(trainer_cfg("trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2"))
    monkeypatch.setattr(guards.os, "cpu_count", lambda: 2)
    with pytest.raises(ConfigError, match="trainer.devices=16 starts 16 CPU processes but this machine has 2 cores"):
        check_devices(trainer_cfg("trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=16"))


def test_memory_estimate_is_the_planners_accounting() -> None:
    cfg = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)
    est = estimate_memory(cfg, 4, trainer_cfg("trainer.precision=bf16-mixed"), "gpu")
    assert est.parameters == 124_439_808
    assert est.states == 16 * est.parameters and est.buffers == 0
    assert est.activations == activation_bytes(cfg, 4, "none", "bf16-mixed")
    fp32 = estimate_memory(cfg, 4, trainer_cfg("trainer.accelerator=cpu", "trainer=ddp", "trainer.devices=2"), "cpu")
    assert fp32.activations == activation_bytes(cfg, 4, "none", "32-true", cpu=True) and fp32.processes == 2
    assert fp32.activations > activation_bytes(cfg, 4, "none", "32-true")  # the CPU heap, dropout's score matrices
    assert fp32.buffers == 4 * fp32.parameters  # DDP's gradient buckets
    assert fp32.total == 2 * fp32.per_process
    fsdp = estimate_memory(cfg, 4, trainer_cfg("trainer=fsdp"), "gpu")  # 8 shards, selective checkpointing
    assert fsdp.states == est.states / 8 and fsdp.buffers > 0
    assert fsdp.activations == activation_bytes(cfg, 4, "selective", "bf16-mixed")


def test_memory_guard_refuses_with_numbers_and_knobs(monkeypatch) -> None:
    cfg = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)
    two_cpu_ranks = trainer_cfg("trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2")
    with pytest.raises(ConfigError) as err:
        check_memory(cfg, 32, two_cpu_ranks, free=24 * GB)
    message = str(err.value)
    est = estimate_memory(cfg, 32, two_cpu_ranks, "cpu")
    assert f"{est.total / GB:,.1f} GB" in message and "24.0 GB" in message and "2 process(es)" in message
    for knob in ("data.batch_size=", "runtime.activation_checkpointing=true", "check_memory=false"):
        assert knob in message
    assert "fsdp" not in message  # FSDP shards over GPUs: on CPU ranks, where activations dominate, it cannot help


def test_memory_guard_suggests_fsdp_only_where_sharding_makes_it_fit(monkeypatch) -> None:
    """The refusal used to suggest trainer=fsdp on a CPU box whose activations alone exceed RAM; now it is offered
    on GPUs, with the fewest GPUs of this machine whose shards make the run fit, and only then."""
    cfg = GPTConfig(vocab_size=50257, block_size=1024, n_layer=24, n_head=16, n_embd=1024)  # GPT-2 medium
    one_gpu = trainer_cfg("trainer.accelerator=gpu", "trainer.precision=bf16-mixed")
    est = estimate_memory(cfg, 1, one_gpu, "gpu")
    assert est.states > est.activations
    # fits over 3 shards with the margin a suggestion leaves
    free = (est.states / 3 + est.activations + guards.PROCESS_OVERHEAD_BYTES) / (1 - MEMORY_MARGIN) + 0.01 * GB
    monkeypatch.setattr(guards, "gpu_count", lambda: 8)
    with pytest.raises(ConfigError, match=r"trainer=fsdp trainer.devices=3 \(shards"):
        check_memory(cfg, 1, one_gpu, free=free)
    monkeypatch.setattr(guards, "gpu_count", lambda: 2)  # two shards are not enough: not offered
    with pytest.raises(ConfigError) as err:
        check_memory(cfg, 1, one_gpu, free=free)
    assert "fsdp" not in str(err.value)


def test_the_suggested_batch_size_fits_by_the_same_estimate() -> None:
    """The refusal used to halve the micro-batch per try (32 -> 16 -> 8 while about 7 fits): its data.batch_size
    is now the largest that passes this very check with MEMORY_MARGIN of the free memory to spare (issue 46: one that
    only just fitted was refused again for the next launch's free memory), and none is offered where not even 1
    fits."""
    import re

    cfg = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)
    two_cpu_ranks = trainer_cfg("trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2")
    with pytest.raises(ConfigError) as err:
        check_memory(cfg, 32, two_cpu_ranks, free=24 * GB)
    suggested = int(re.search(r"data\.batch_size=(\d+)", str(err.value)).group(1))
    assert 1 <= suggested < 16
    assert "leaving 10% of the free memory spare" in str(err.value)
    check_memory(cfg, suggested, two_cpu_ranks, free=24 * GB * (1 - MEMORY_MARGIN))  # passes with the margin
    with pytest.raises(ConfigError):
        check_memory(cfg, suggested + 1, two_cpu_ranks, free=24 * GB * (1 - MEMORY_MARGIN))  # the largest that does
    with pytest.raises(ConfigError) as err:
        check_memory(cfg, 32, two_cpu_ranks, free=4 * GB)  # weights and Adam alone do not fit
    assert "data.batch_size=" not in str(err.value)
    assert "a smaller model.block_size" not in str(err.value)  # no block size fits: it used to send the user there


def test_memory_refusal_where_no_block_size_fits_names_the_parameters_that_do() -> None:
    """Issue 46 case: `model=gpt2_xl` on a 24 GB CPU was told "a smaller model.block_size or model"; typed,
    `model.block_size=16 data.batch_size=1` was refused again, since the weights, gradients and Adam states alone
    took 24.9 GB. The refusal now says no block size fits and how many parameters would, and that count passes."""
    import re

    xl = GPTConfig(vocab_size=50257, block_size=1024, n_layer=48, n_head=25, n_embd=1600)
    cpu = trainer_cfg("trainer.accelerator=cpu")
    with pytest.raises(ConfigError) as err:
        check_memory(xl, 32, cpu, free=24 * GB)
    message = str(err.value)
    assert "a smaller model.block_size" not in message and "at any model.block_size" in message
    fits = int(re.search(r"at most about ([\d,]+)M parameters", message).group(1).replace(",", "")) * 10**6
    with pytest.raises(ConfigError):  # the old way out, typed
        check_memory(replace(xl, block_size=16), 1, cpu, free=24 * GB)
    small = GPTConfig(vocab_size=50257, block_size=16, n_layer=24, n_head=16, n_embd=1024)  # ~355M
    assert estimate_memory(small, 1, cpu, "cpu").parameters <= fits
    check_memory(small, 1, cpu, free=24 * GB)
    with pytest.raises(ConfigError) as err:  # a run whose activations are what does not fit keeps the old words
        check_memory(small, 4096, cpu, free=24 * GB)
    assert "a smaller model.block_size or a smaller model preset" in str(err.value)
    assert str(err.value).endswith("To skip this check, set the top-level key check_memory=false.")
    assert "model. " not in str(err.value)  # issue 54: "... or model. check_memory=false" read as a key `model.`


def test_memory_guard_lets_a_fitting_run_through() -> None:
    cfg = GPTConfig(vocab_size=257)  # nano
    est = check_memory(cfg, 32, trainer_cfg("trainer.accelerator=cpu"), free=4 * GB)
    assert est.total < 4 * GB
    check_memory(cfg, 32, trainer_cfg("trainer.accelerator=cpu"))  # the machine's real free RAM


def test_memory_guard_override(tmp_path, monkeypatch) -> None:
    """check_memory=false skips the guard: the same run that is refused goes on to training."""
    from gptlab.apps.train import train

    monkeypatch.setattr(guards, "free_bytes", lambda accelerator: 1.0)  # a machine with no free memory
    tiny = ["model.n_layer=1", "model.n_head=2", "model.n_embd=32", "model.block_size=32", "data.batch_size=2",
            "trainer.accelerator=cpu", "trainer.max_steps=1", "scheduler.warmup_steps=0", "callbacks.progress_bar=null",
            "trainer.limit_val_batches=1", "callbacks.text_samples=null", "~logger"]
    with pytest.raises(ConfigError, match="needs about .* GB but free RAM is 0.0 GB"):
        train(compose_config(tiny, tmp_path / "refused"))
    assert train(compose_config([*tiny, "check_memory=false"], tmp_path / "run")) is not None


def test_the_mission_command_without_gpus_fails_in_seconds(tmp_path) -> None:
    """`python src/train.py model=gpt2_small trainer.devices=8` here (no GPU): one message, exit 2, no run dir,
    no process spawned (it used to start 8 CPU ranks until the OOM killer came)."""
    import torch

    if torch.cuda.device_count() >= 8:
        pytest.skip("this machine has 8 GPUs: the command is valid here")
    proc = run_train(["model=gpt2_small", "trainer.devices=8", f"paths.log_dir={tmp_path / 'outputs'}"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "gptlab: error: trainer.devices=8" in proc.stderr and "Traceback" not in proc.stderr
    assert "trainer=ddp trainer.accelerator=cpu trainer.devices=2" in proc.stderr
    assert not (tmp_path / "outputs" / "runs").exists()


def batching(windows: int | None, global_batch_tokens: int | None = None, random: bool = True) -> Batching:
    return Batching(block_size=1024, ranks=2, accumulate=1, global_batch_tokens=global_batch_tokens,
                    samples_per_epoch_lengthens=random, epoch_windows=lambda: windows)


def test_the_suggested_batch_is_one_the_corpus_fills_and_the_step_divides() -> None:
    """Issue 46: the suggested batch passed memory and was then refused because an epoch of the corpus held no
    optimizer step of it. It is capped by the epoch (the words name data.samples_per_epoch, with which memory's own
    batch fits the epoch too), divides global_batch_tokens' step per rank, and a step no batch can fill says so."""
    import re

    cfg = GPTConfig(vocab_size=50257, block_size=1024, n_layer=12, n_head=12, n_embd=768)
    two_cpu_ranks = trainer_cfg("trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2")

    def refused(**kwargs) -> str:
        with pytest.raises(ConfigError) as err:
            check_memory(cfg, 32, two_cpu_ranks, free=24 * GB, batching=batching(**kwargs))
        return str(err.value)

    by_memory = int(re.search(r"data\.batch_size=(\d+)", refused(windows=None)).group(1))
    assert by_memory > 2
    capped = refused(windows=5)  # 2 ranks x 2 windows fit in an epoch of 5
    assert re.search(r"data\.batch_size=2 \(the largest whose optimizer step of 4 windows an epoch of 5 ", capped)
    assert f"`data.batch_size={by_memory} data.samples_per_epoch={2 * by_memory}`" in capped
    assert "data.sampling=random" in refused(windows=5, random=False)
    empty = refused(windows=1)
    assert "holds no optimizer step even at data.batch_size=1" in empty and "(about" not in empty
    assert "`data.batch_size=1 data.samples_per_epoch=2`" in empty
    step = refused(windows=None, global_batch_tokens=2 * 1024 * 9)  # 9 windows per rank a step: 9, 3 or 1
    assert int(re.search(r"data\.batch_size=(\d+)", step).group(1)) in {d for d in (1, 3) if d <= by_memory}
    short = refused(windows=10, global_batch_tokens=2 * 1024 * 9)
    assert "holds no optimizer step of global_batch_tokens=18432 (18 windows)" in short
    assert "data.samples_per_epoch=18`" in short
