"""A first run, as a new user sees it: a final validation whatever val_check_interval is, the best val/loss
kept across a resume, a short banner instead of the resolved config, files the group can read, fast_dev_run
writing nothing, and the GPT-2 ranks found where scripts/fetch_gpt2_ranks.py puts them."""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
from pathlib import Path

import pytest
import torch
from helpers import TINY, compose_config, scalars

from gptlab.apps.banner import vocab_warning
from gptlab.apps.train import train
from gptlab.atomic import atomic_write_text
from gptlab.data.tokenizers import ByteTokenizer, TiktokenTokenizer
from gptlab.errors import ConfigError
from gptlab.model import GPTConfig, count_parameters, training_flops_per_token

SHORT = [*TINY, "trainer.max_steps=6", "trainer.val_check_interval=80", "scheduler.warmup_steps=2"]


@pytest.fixture(scope="module")
def short_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """6 steps with val_check_interval=80: before, no validation ever ran. Returns the dir and the log lines."""
    run_dir = tmp_path_factory.mktemp("short") / "run"
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("gptlab")
    old_level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    old_mask = os.umask(0o022)
    try:
        train(compose_config(SHORT, run_dir))
    finally:
        os.umask(old_mask)
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    return run_dir, records


def test_every_run_ends_with_a_validation(short_run) -> None:
    run_dir, _ = short_run
    summary = json.loads((run_dir / "run_summary.json").read_text())
    assert summary["global_step"] == 6
    assert summary["final_val_loss"] is not None and summary["best_val_loss"] == summary["final_val_loss"]
    assert len(scalars(run_dir)["val/loss"]) == 1  # exactly one validation: at the last step, as the checkpoint says
    assert list((run_dir / "checkpoints").glob("step0000006-val*.ckpt"))  # the best checkpoint exists


def test_best_val_loss_survives_a_resume(short_run, tmp_path) -> None:
    """The checkpoint holds a better best than the continued run reaches; run_summary.json keeps it."""
    run_dir, _ = short_run
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    keys = [k for k in ckpt["callbacks"] if "'monitor': 'val/loss'" in k]
    assert keys
    for key in keys:
        ckpt["callbacks"][key]["best_model_score"] = torch.tensor(0.125)
    torch.save(ckpt, tmp_path / "better.ckpt")
    continued = tmp_path / "continued"
    best = train(compose_config([*SHORT, "trainer.max_steps=8", f"ckpt_path={tmp_path / 'better.ckpt'}"], continued))
    summary = json.loads((continued / "run_summary.json").read_text())
    assert best == summary["best_val_loss"] == 0.125
    assert summary["final_val_loss"] > 0.125 and summary["global_step"] == 8


def test_banner_says_what_runs_where_and_not_the_whole_config(short_run) -> None:
    run_dir, lines = short_run
    text = "\n".join(lines)
    assert "Resolved config" not in text and "global_batch_tokens" not in text  # the 130-line config: file only
    cfg = GPTConfig(vocab_size=257, n_layer=1, n_head=2, n_embd=32, block_size=32)
    params = count_parameters(cfg)["total"]
    assert f"{params:,} parameters" in text
    flops = training_flops_per_token(cfg)["total"]  # MFU's and HFU's, equal without full checkpointing
    assert (f"runtime  compile off, activation checkpointing none; FLOPs per token: model {flops:,} "
            f"(x_throughput/mfu), hardware {flops:,} (x_throughput/hfu, no matmul recomputed)") in text
    for expected in ("parameters", "tokenizer bytes (257 ids)", "data pydocs", "tokens = micro-batch 4 x 32",
                     "6 steps", "strategy SingleDevice", "precision 32-true", f"run dir  {run_dir}",
                     "intra-op CPU thread(s) (", "runtime.cpu_threads=N sets the count"):
        assert expected in text, (expected, text)
    assert (run_dir / "config_resolved.yaml").read_text().count("\n") > 100


def test_files_follow_the_umask(short_run, tmp_path) -> None:
    run_dir, _ = short_run
    for name in ("config_resolved.yaml", "run_summary.json"):  # written under umask 022 by the fixture
        assert stat.S_IMODE((run_dir / name).stat().st_mode) == 0o644, name
    old_mask = os.umask(0o027)
    try:
        atomic_write_text(tmp_path / "group.txt", "x")
    finally:
        os.umask(old_mask)
    assert stat.S_IMODE((tmp_path / "group.txt").stat().st_mode) == 0o640


def test_fast_dev_run_writes_nothing(tmp_path) -> None:
    run_dir = tmp_path / "run"
    train(compose_config([*TINY, "debug=fast_dev_run"], run_dir))
    assert not run_dir.exists()


def test_gpt2_sized_preset_on_bytes_warns_once() -> None:
    cfg = GPTConfig(vocab_size=50257, n_layer=1, n_head=2, n_embd=32)
    message = vocab_warning(cfg, 50257, ByteTokenizer())
    assert message is not None and "\n" not in message
    assert "tokenizer=gpt2" in message and "experiment=gpt2_owt" in message
    assert vocab_warning(cfg, None, ByteTokenizer()) is None  # vocab taken from the tokenizer: nothing wasted


def test_fetched_ranks_are_found_without_a_flag(gpt2_ranks, tmp_path, monkeypatch) -> None:
    import tiktoken

    def offline(name):
        raise AssertionError("the tokenizer should not try to download: the ranks are in the default location")

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    monkeypatch.chdir(tmp_path)  # a fresh launch dir, as after `python scripts/fetch_gpt2_ranks.py` there
    (tmp_path / "data" / "cache" / "tiktoken").mkdir(parents=True)
    shutil.copy(gpt2_ranks, tmp_path / "data" / "cache" / "tiktoken" / "gpt2.tiktoken")
    assert TiktokenTokenizer("gpt2").encode("Hello world") == [15496, 995]
    assert TiktokenTokenizer("r50k_base").vocab_size == 50257  # the same file serves r50k_base
    monkeypatch.setenv("GPTLAB_RANKS_DIR", str(tmp_path / "elsewhere"))  # the variable moves the location
    with pytest.raises(ConfigError, match="should not try to download"):
        TiktokenTokenizer("gpt2")


def test_download_error_is_one_clause_naming_the_host(monkeypatch, tmp_path) -> None:
    """Without a network, gptlab's message names the host it could not reach, not urllib3's whole chain."""
    import requests
    import tiktoken

    tail = "x" * 400 + " END-OF-MESSAGE"

    def offline(name):
        raise requests.ConnectionError(f"HTTPSConnectionPool(host='openaipublic.blob.core.windows.net', port=443): "
                                       f"Max retries exceeded (Caused by NameResolutionError({tail}))")

    monkeypatch.setattr(tiktoken, "get_encoding", offline)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        TiktokenTokenizer("gpt2")
    message = str(err.value)
    assert "(no network: openaipublic.blob.core.windows.net could not be reached)" in message
    assert "END-OF-MESSAGE" not in message and "NameResolutionError" not in message and "\n" not in message
    assert str(tmp_path / "data" / "cache" / "tiktoken" / "gpt2.tiktoken") in message  # where it looked, absolute
    assert "fetch_gpt2_ranks.py" in message


def test_progress_bar_counts_optimizer_steps_of_the_whole_run(tmp_path, capsys) -> None:
    overrides = [o for o in SHORT if not o.startswith("callbacks.progress_bar")]
    train(compose_config([*overrides, "callbacks.progress_bar.refresh_rate=2", "trainer.accumulate_grad_batches=2"],
                         tmp_path / "run"))
    err = capsys.readouterr().err
    assert "6/6" in err and "step" in err  # 6 optimizer steps (12 micro-batches), one bar for the run
    assert "12/12" not in err and "Epoch" not in err
    assert "loss=" in err and "tok/s=" in err and "<00:00" in err  # tqdm's remaining-time field is the ETA


def test_a_sweep_announces_its_dir(capsys) -> None:
    from omegaconf import OmegaConf

    from gptlab.launch.hydra_callbacks import AnnounceSweepDir

    cfg = OmegaConf.create({"hydra": {"sweep": {"dir": "outputs/multiruns/x/2026-01-01/00-00-00"}}})
    AnnounceSweepDir().on_multirun_start(cfg)
    AnnounceSweepDir().on_multirun_end(cfg)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "gptlab: sweep dir outputs/multiruns/x/2026-01-01/00-00-00"
    assert "sweep finished" in out[1] and "ablation_report.py outputs/multiruns/x/2026-01-01/00-00-00" in out[1]


def test_truncated_manifest_is_named_not_a_traceback(corpus, tmp_path) -> None:
    from gptlab.data.prepare import load_prepared, prepare, prepared_dir
    from gptlab.data.sources import TextFiles

    tokenizer = ByteTokenizer()
    prepare(TextFiles([str(p) for p in corpus]), tokenizer, tmp_path / "c", val_fraction=0.1, shard_tokens=4000,
            progress=False)
    manifest = prepared_dir(tmp_path / "c", tokenizer) / "manifest.json"
    manifest.write_text(manifest.read_text()[:40])  # a copy cut short
    with pytest.raises(ConfigError, match=r"manifest.json is not valid JSON .*prepare_data.py"):
        load_prepared(tmp_path / "c", tokenizer)


def test_unwritable_run_dir_is_one_line_before_hydra_creates_it(capsys, tmp_path) -> None:
    from omegaconf import OmegaConf

    from gptlab.launch.hydra_callbacks import CheckOutputDir

    bad = OmegaConf.create({"hydra": {"run": {"dir": "/dev/null/run"}, "sweep": {"dir": "/dev/null/sweep"}}})
    for hook in (CheckOutputDir().on_run_start, CheckOutputDir().on_multirun_start):
        with pytest.raises(SystemExit) as exit_info:
            hook(bad)
        assert exit_info.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("gptlab: error: hydra.run.dir='/dev/null/run' cannot be written")
    assert err[1].startswith("gptlab: error: hydra.sweep.dir='/dev/null/sweep' cannot be written")
    CheckOutputDir().on_run_start(OmegaConf.create({"hydra": {"run": {"dir": str(tmp_path / "new" / "run")}}}))


def test_console_drops_known_noise_and_keeps_other_stop_reasons() -> None:
    import warnings

    from gptlab.launch import quiet

    quiet.install()
    lightning_log = logging.getLogger("lightning.pytorch.utilities.rank_zero")  # Lightning's rank_zero_info
    shown: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: shown.append(record.getMessage())  # type: ignore[method-assign]
    lightning_log.addHandler(handler)
    old_level = lightning_log.level
    lightning_log.setLevel(logging.INFO)
    try:
        lightning_log.info("`Trainer.fit` stopped: `max_steps=6` reached.")
        lightning_log.info("`Trainer.fit` stopped: `max_time=00:00:01:00` reached.")
    finally:
        lightning_log.removeHandler(handler)
        lightning_log.setLevel(old_level)
    assert shown == ["`Trainer.fit` stopped: `max_time=00:00:01:00` reached."]
    with warnings.catch_warnings(record=True) as caught:
        quiet.install()  # catch_warnings reset the filters
        warnings.warn("The 'train_dataloader' does not have many workers which may be a bottleneck.", stacklevel=1)
        warnings.warn("some other warning", stacklevel=1)
    assert [str(w.message) for w in caught] == ["some other warning"]
