"""trainer=fsdp (FSDP2, fully_shard per Block) on 2 CPU ranks with gloo: it trains like one device on the same global
batch, each rank holds only its shard, the checkpoint is a folder with one file per rank that converts to one file
and to a Hugging Face export with the same logits, and it resumes exactly on 2 ranks and on 1 (slow tests).

Same config everywhere: data.batch_size=2 and global_batch_tokens=128 (4 windows of 32 tokens per step): 1 rank
accumulates 2 micro-batches, 2 ranks take 1 each. dropout=0 (each rank draws its own masks), fp32."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from helpers import PROBE_IDS, compose_config, run_script, run_tiny, scalars, train_in_process

from gptlab.checkpoint.reader import checkpoint_problem, load_model, read_checkpoint
from gptlab.errors import ConfigError

RUN = ["model.n_layer=2", "model.dropout=0.0", "data.batch_size=2", "global_batch_tokens=128",
       "trainer.val_check_interval=2", "trainer.precision=32-true"]
FSDP = ["trainer=fsdp", "trainer.accelerator=cpu"]


def fsdp_run(run: Path, devices: int, *overrides: str) -> None:
    probe = ["+callbacks.shards._target_=helpers.RecordShards", f"+callbacks.shards.path={run / 'shards.pt'}"]
    proc = run_tiny(run, *RUN, *FSDP, f"trainer.devices={devices}", *probe, *overrides, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]


def losses(run: Path) -> dict[int, float]:
    return scalars(run)["train/loss"]


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 steps on 2 FSDP ranks."""
    run = tmp_path_factory.mktemp("fsdp")
    fsdp_run(run, 2, "trainer.max_steps=4")
    return run


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same 4 steps on one device (no FSDP), in this process."""
    run = tmp_path_factory.mktemp("single")
    train_in_process(run, *RUN, "trainer.max_steps=4")
    return run


def test_two_fsdp_ranks_train_like_one_device(sharded: Path, single: Path) -> None:
    # Same windows per step, split differently (2 ranks vs 2 accumulated micro-batches); only the order of the
    # gradient sum differs (reduce-scatter vs accumulation), hence float tolerance, not bits. train/loss is the whole
    # step's mean over micro-batches and ranks, so it agrees too.
    ours = read_checkpoint(sharded / "checkpoints" / "last.ckpt")["state_dict"]
    theirs = read_checkpoint(single / "checkpoints" / "last.ckpt")["state_dict"]
    assert sorted(ours) == sorted(theirs)
    for name in theirs:
        torch.testing.assert_close(ours[name], theirs[name], rtol=1e-4, atol=1e-6, msg=name)
    val_ours, val_theirs = scalars(sharded)["val/loss"], scalars(single)["val/loss"]
    assert sorted(val_ours) == sorted(val_theirs) and len(val_ours) >= 2
    for step in val_theirs:
        assert val_ours[step] == pytest.approx(val_theirs[step], rel=1e-5), f"val/loss at step {step}"
    train_ours, train_theirs = losses(sharded), losses(single)
    assert sorted(train_ours) == sorted(train_theirs) == [1, 2, 3, 4]
    for step in train_theirs:
        assert train_ours[step] == pytest.approx(train_theirs[step], rel=1e-5), f"train/loss at step {step}"


def test_each_rank_holds_only_its_shard(sharded: Path) -> None:
    records = [torch.load(sharded / f"shards.pt.rank{r}")["sizes"] for r in (0, 1)]
    assert sorted(records[0]) == sorted(records[1]) and len(records[0]) > 10
    for name, (local, whole) in records[0].items():
        other = records[1][name][0]
        assert local + other == whole, name  # dim-0 shards that add up to the whole: nothing replicated
        assert 0 < local < whole and 0 < other < whole, name


def test_checkpoint_is_a_folder_with_one_file_per_rank(sharded: Path) -> None:
    last = sharded / "checkpoints" / "last.ckpt"
    assert last.is_dir()
    assert sorted(p.name for p in last.glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    assert not list((sharded / "checkpoints").glob(".*"))  # no temp folder left behind
    assert read_checkpoint(last, mmap=True)["global_step"] == 4
    best = list((sharded / "checkpoints").glob("step*.ckpt"))  # the best by val/loss: step 4's, as last.ckpt
    assert len(best) == 1 and read_checkpoint(best[0], mmap=True)["global_step"] == 4
    # last.ckpt is the same files under a second name (hard links), not a second copy
    assert {p.name: p.stat().st_ino for p in best[0].iterdir()} == {p.name: p.stat().st_ino for p in last.iterdir()}


def test_converted_checkpoint_gives_the_sharded_models_logits(sharded: Path, tmp_path: Path) -> None:
    sharded_logits = torch.load(sharded / "shards.pt.rank0")["logits"]
    assert torch.equal(sharded_logits, torch.load(sharded / "shards.pt.rank1")["logits"])
    out = tmp_path / "one.ckpt"
    proc = run_script("scripts/convert_checkpoint.py", [str(sharded / "checkpoints" / "last.ckpt"), str(out)])
    assert f"wrote {out} (step 4" in proc.stdout
    plain, _ = load_model(out)
    direct, _ = load_model(sharded / "checkpoints" / "last.ckpt")  # eval, sample and export read the folder too
    with torch.no_grad():
        torch.testing.assert_close(plain.eval()(PROBE_IDS), sharded_logits, rtol=0, atol=1e-5)
        assert torch.equal(direct.eval()(PROBE_IDS), plain(PROBE_IDS))
    export = tmp_path / "hf"
    run_script("scripts/export_hf.py", [f"ckpt_path={out}", f"out={export}"])
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(export).eval()
    with torch.no_grad():
        theirs = hf(PROBE_IDS).logits[..., : plain.config.vocab_size]
        torch.testing.assert_close(theirs, sharded_logits[..., : plain.config.vocab_size], rtol=1e-4, atol=1e-4)


def test_sharded_checkpoint_outside_fsdp_and_fsdp1_keys_are_refused(sharded: Path, tmp_path: Path) -> None:
    from gptlab.preflight.early_checks import check_before_run

    cfg = compose_config(RUN + [f"ckpt_path={sharded / 'checkpoints' / 'last.ckpt'}"], tmp_path)
    with pytest.raises(ConfigError, match="is a sharded checkpoint.*trainer=fsdp.*drop ckpt_path"):
        check_before_run(cfg)
    from gptlab.config.validate import check

    old = compose_config(["trainer=fsdp", "+trainer.strategy.sharding_strategy=FULL_SHARD"], tmp_path)
    with pytest.raises(ConfigError, match="sharding_strategy is gone.*reshard_after_forward"):
        check(old)
    typo = compose_config(["trainer=fsdp", "+trainer.strategy.reshard_after_fwd=false"], tmp_path)
    with pytest.raises(ConfigError, match="trainer.strategy.reshard_after_fwd is not a key of trainer=fsdp"):
        check(typo)


def test_a_partial_or_damaged_folder_is_never_taken_as_whole(sharded: Path, tmp_path: Path) -> None:
    from gptlab.checkpoint.reader import newest_loadable_checkpoint
    from gptlab.execution.fsdp_strategy import partial_name

    checkpoints = tmp_path / "checkpoints"
    shutil.copytree(sharded / "checkpoints", checkpoints)
    last = checkpoints / "last.ckpt"
    shutil.copytree(last, partial_name(last))  # a save killed before its rename: a whole-looking hidden folder
    damaged = checkpoints / "step0000009.ckpt"  # newer, but a shard is missing (copied in part)
    shutil.copytree(last, damaged)
    (damaged / "__1_0.distcp").unlink()
    problem = checkpoint_problem(damaged)
    assert "lacks __1_0.distcp" in problem
    assert newest_loadable_checkpoint(tmp_path) in {last, *checkpoints.glob("step*4*.ckpt")}  # a whole one


def test_restart_deletes_the_sharded_checkpoints(sharded: Path, tmp_path: Path) -> None:
    from gptlab.runs.resume import resume_mode, start_over

    run = tmp_path / "run"
    shutil.copytree(sharded / "checkpoints", run / "checkpoints")
    removed = start_over(resume_mode(compose_config(["resume=restart"], run)), run)
    assert run / "checkpoints" / "last.ckpt" in removed
    assert not list((run / "checkpoints").iterdir())


def first_leg(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    run = tmp_path_factory.mktemp(name)
    fsdp_run(run, 2, "trainer.max_steps=2")
    return run


@pytest.mark.slow
def test_resume_on_two_ranks_is_bit_exact(sharded: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    run = first_leg(tmp_path_factory, "resume2")
    fsdp_run(run, 2, "trainer.max_steps=4", "resume=auto")
    assert losses(run) == losses(sharded)  # every step's loss, to the bit
    ours = read_checkpoint(run / "checkpoints" / "last.ckpt")["state_dict"]
    theirs = read_checkpoint(sharded / "checkpoints" / "last.ckpt")["state_dict"]
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)


@pytest.mark.slow
def test_resume_on_one_rank_continues(sharded: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """2 ranks' sharded checkpoint onto 1 rank: DCP reshards it; the gradient is summed in another order, so float
    tolerance rather than bits."""
    run = first_leg(tmp_path_factory, "resume1")
    fsdp_run(run, 1, "trainer.max_steps=4", "resume=auto")
    assert sorted(p.name for p in (run / "checkpoints" / "last.ckpt").glob("*.distcp")) == ["__0_0.distcp"]
    ours = read_checkpoint(run / "checkpoints" / "last.ckpt")
    theirs = read_checkpoint(sharded / "checkpoints" / "last.ckpt")
    assert ours["global_step"] == 4
    for name, tensor in theirs["state_dict"].items():
        torch.testing.assert_close(ours["state_dict"][name], tensor, rtol=1e-4, atol=1e-6, msg=name)
    val_ours, val_theirs = scalars(run)["val/loss"], scalars(sharded)["val/loss"]
    assert val_ours[4] == pytest.approx(val_theirs[4], rel=1e-5)


def test_plan_one_unit_per_block_and_bf16_gathers(tmp_path: Path) -> None:
    """shard_gpt on a 1-rank gloo group in this process: every Block and the root are FSDP units, the gathered
    weights a block computes with are bf16 under bf16-mixed while the sharded master weights stay fp32."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule

    from gptlab.execution.fsdp2 import shard_gpt
    from gptlab.model import GPT, GPTConfig

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        model = GPT(GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=16))
        shard_gpt(model, init_device_mesh("cpu", (1,)), param_dtype=torch.bfloat16,
                  reshard_after_forward=True)
        assert isinstance(model, FSDPModule) and all(isinstance(b, FSDPModule) for b in model.blocks)
        seen = []
        model.blocks[1].attn.qkv.register_forward_hook(lambda m, args, out: seen.append(m.weight.dtype))
        logits = model(torch.randint(0, 50, (2, 16)))
        assert seen == [torch.bfloat16] and logits.dtype == torch.bfloat16
        model.reshard()  # the root keeps its gathered weights after forward (needed first in backward)
        assert all(p.dtype == torch.float32 and hasattr(p, "to_local") for p in model.parameters())
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_per_block_compile_trains_like_eager(sharded: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """runtime.compile=true under FSDP compiles each block (inductor's CPU kernels here): the same weights as eager
    to float tolerance (inductor fuses and reorders float ops)."""
    run = tmp_path_factory.mktemp("compiled")
    fsdp_run(run, 2, "trainer.max_steps=4", "runtime.compile=true")
    ours = read_checkpoint(run / "checkpoints" / "last.ckpt")["state_dict"]
    theirs = read_checkpoint(sharded / "checkpoints" / "last.ckpt")["state_dict"]
    assert torch.load(run / "shards.pt.rank0")["compiled_blocks"] == [True, True]
    assert torch.load(sharded / "shards.pt.rank0")["compiled_blocks"] == [False, False]
    assert sorted(ours) == sorted(theirs)  # per-block compile in place: no `_orig_mod.` in the keys
    for name, tensor in theirs.items():
        torch.testing.assert_close(ours[name], tensor, rtol=1e-4, atol=1e-5, msg=name)
