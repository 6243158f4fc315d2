"""Checkpoint disk use is what it must be: the guard counts the checkpoints that can exist at once (best, last and
one being written with the default callbacks; nothing for a null callback), a real run on a small disk never holds
more, best and last share their files at the same step, a preemption replaces last.ckpt, and a run resumed on the
disk as it was is accepted (the checkpoints it replaces count as room)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import compose_config, compose_tiny, load_checkpoint, train_in_process

from gptlab.errors import ConfigError, PreemptedError
from gptlab.model.accounting import count_parameters
from gptlab.preflight import checkpoint_plan
from gptlab.preflight.checkpoint_plan import check_checkpoint_space, checkpoint_slots, need
from gptlab.preflight.early_checks import build_model_config
from gptlab.preflight.output_dirs import checkpoint_bytes

GIB = 2**30
DISK = 16 * 2**20  # the small_disk fixture's tmpfs
# 336,560 parameters: a checkpoint estimate of 4.0 MB, so three fit on the 16 MiB disk and four (the old guard's
# count, best + last + preempted + one being written) do not fit beside a run's other files.
MODEL = ["model.n_embd=112", "model.n_layer=2"]
RUN = [*MODEL, "trainer.val_check_interval=2", "callbacks.periodic_checkpoint.every_n_train_steps=3"]


def _checkpoint_size(cfg) -> int:
    return checkpoint_bytes(count_parameters(build_model_config(cfg.model, 256))["total"])


def test_gpt3_xl_default_checkpoints_fit_a_64_gb_disk(monkeypatch) -> None:
    cfg = compose_config(["model=gpt3_xl", "trainer=fsdp", "trainer.devices=1"], Path("/data/run"))
    size = checkpoint_bytes(count_parameters(build_model_config(cfg.model, 50257))["total"])
    assert need(checkpoint_slots(cfg.callbacks)).count == 3  # best, last (periodic, best's and preemption's), writing
    monkeypatch.setattr(checkpoint_plan, "free_bytes", lambda d: int(63.95 * GIB))  # the H200 box of issue 31
    check_checkpoint_space(cfg.callbacks, size, cfg.paths.log_dir)
    monkeypatch.setattr(checkpoint_plan, "free_bytes", lambda d: 40 * GIB)  # two fit, three do not
    with pytest.raises(ConfigError) as refused:
        check_checkpoint_space(cfg.callbacks, size, cfg.paths.log_dir)
    message = str(refused.value)
    assert "40.00 GiB free" in message and "need about 50.87 GiB" in message, message
    assert "callbacks.model_checkpoint.save_top_k=0" in message  # the callback to change, since two then fit
    monkeypatch.setattr(checkpoint_plan, "free_bytes", lambda d: 20 * GIB)  # not even two
    with pytest.raises(ConfigError, match="callbacks.model_checkpoint=null callbacks.periodic_checkpoint=null "
                                          "callbacks.preemption_checkpoint=null"):
        check_checkpoint_space(cfg.callbacks, size, cfg.paths.log_dir)


@pytest.mark.parametrize(("nulled", "count"), [
    ([], 3),
    (["callbacks.preemption_checkpoint=null"], 3),  # it shares last.ckpt: nothing less
    (["callbacks.model_checkpoint=null"], 2),  # last.ckpt and one being written
    (["callbacks.model_checkpoint.save_top_k=3"], 5),
    (["callbacks.model_checkpoint=null", "callbacks.periodic_checkpoint=null", "callbacks.preemption_checkpoint=null"],
     0),
])
def test_the_guard_counts_only_what_the_callbacks_keep(tmp_path: Path, monkeypatch, nulled, count) -> None:
    cfg = compose_tiny(tmp_path, *nulled)
    assert need(checkpoint_slots(cfg.callbacks)).count == count
    monkeypatch.setattr(checkpoint_plan, "free_bytes", lambda d: count * 1000)
    check_checkpoint_space(cfg.callbacks, 1000, cfg.paths.log_dir)  # exactly enough
    if count:
        monkeypatch.setattr(checkpoint_plan, "free_bytes", lambda d: count * 1000 - 1)
        with pytest.raises(ConfigError, match=f"and one being written, {count} x "):
            check_checkpoint_space(cfg.callbacks, 1000, cfg.paths.log_dir)


class DiskWatch:
    """Counts, at every rename and link (the moments a whole new checkpoint stands beside the one it replaces), the
    checkpoint-sized files under `directory`, temp files included, each inode once."""

    def __init__(self, directory: Path, size: int, monkeypatch) -> None:
        self.directory, self.size, self.peak = directory, size, 0
        for name in ("replace", "link"):
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._watching(real))

    def _watching(self, real):
        def call(src, dst, *args, **kwargs):
            self.peak = max(self.peak, self.count())
            return real(src, dst, *args, **kwargs)
        return call

    def count(self) -> int:
        if not self.directory.is_dir():
            return 0
        inodes = {(p.stat().st_dev, p.stat().st_ino) for p in self.directory.rglob("*")
                  if p.is_file() and p.stat().st_size >= self.size // 2}
        return len(inodes)


def test_a_run_on_a_small_disk_holds_what_the_guard_counts_and_resumes_after_preemption(
        tmp_path: Path, small_disk, monkeypatch) -> None:
    disk, real = small_disk
    run = disk / "run"
    if not real:  # a plain dir: the same 16 MiB disk, measured by what is in it
        monkeypatch.setattr(checkpoint_plan, "free_bytes", lambda d: DISK - sum(
            p.stat().st_size for p in disk.rglob("*") if p.is_file()))
    cfg = compose_tiny(run, *RUN)
    size = _checkpoint_size(cfg)
    slots = need(checkpoint_slots(cfg.callbacks)).count
    assert slots == 3 and 3 * size < DISK < 4 * size + 2**20 * 4  # the old count would not have left room
    watch = DiskWatch(run / "checkpoints", size, monkeypatch)

    train_in_process(run, *RUN, "trainer.max_steps=8")  # saves at 2 4 6 8 (validation) and 3 6 (periodic)
    assert watch.peak == slots, watch.peak  # what existed at once is what the guard counted, no more
    checkpoints = run / "checkpoints"
    best = [p for p in checkpoints.glob("step*.ckpt")]
    assert len(best) == 1 and sorted(p.name for p in checkpoints.iterdir()) == sorted([best[0].name, "last.ckpt"])
    assert load_checkpoint(best[0])["global_step"] == load_checkpoint(checkpoints / "last.ckpt")["global_step"] == 8
    assert best[0].stat().st_ino == (checkpoints / "last.ckpt").stat().st_ino  # one copy on disk, two names

    # Continued on the disk as it was (issue 35: the old guard counted the last.ckpt it replaces as new), then
    # preempted: the preemption save replaces last.ckpt, there is no preempted.ckpt beside it.
    with pytest.raises(PreemptedError, match="SIGTERM at step 10"):
        train_in_process(run, *RUN, "trainer.max_steps=12", "resume=auto", "+callbacks.killer.step=9",
                         "+callbacks.killer._target_=helpers.KillAtStep", "+callbacks.killer.signal_name=SIGTERM")
    assert load_checkpoint(checkpoints / "last.ckpt")["global_step"] == 10
    assert not list(checkpoints.glob("preempted*")) and len(list(checkpoints.glob("*.ckpt"))) == 2
    train_in_process(run, *RUN, "trainer.max_steps=12", "resume=auto")
    assert load_checkpoint(checkpoints / "last.ckpt")["global_step"] == 12
    assert len(list(checkpoints.glob("*.ckpt"))) == 2  # no older best left behind by the resumed runs
    assert watch.peak == slots, watch.peak

    # Too little room to continue: the message counts the checkpoints it replaces and offers no other disk (a
    # resumed run cannot move).
    monkeypatch.setattr(checkpoint_plan, "free_bytes", lambda d: 0)
    cfg = compose_tiny(run, *RUN, "trainer.max_steps=16", "resume=auto")
    with pytest.raises(ConfigError) as refused:
        check_checkpoint_space(cfg.callbacks, size, cfg.paths.log_dir)
    message = str(refused.value)
    assert "in the checkpoints this run replaces" in message and "last.ckpt" in message, message
    assert "paths.log_dir" not in message and "hydra.run.dir" not in message, message


def test_a_filesystem_without_hard_links_leaves_last_as_it_was(tmp_path: Path, monkeypatch) -> None:
    import errno

    from gptlab.atomic import link_into_place

    best, last = tmp_path / "best.ckpt", tmp_path / "last.ckpt"
    best.write_bytes(b"best")
    last.write_bytes(b"older")
    folder = tmp_path / "best_folder.ckpt"
    folder.mkdir()
    (folder / "meta.pt").write_bytes(b"meta")
    assert link_into_place(best, last) and last.read_bytes() == b"best" and last.stat().st_ino == best.stat().st_ino

    def no_links(src, dst, *args, **kwargs):
        raise OSError(errno.EPERM, "Operation not permitted")

    last.unlink()  # then a new file, as every save writes one (writing into the link would change best too)
    last.write_bytes(b"older")
    monkeypatch.setattr(os, "link", no_links)
    assert not link_into_place(best, last) and last.read_bytes() == b"older"  # the caller then writes a copy
    assert best.read_bytes() == b"best"
    assert not link_into_place(folder, tmp_path / "last_folder.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["best.ckpt", "best_folder.ckpt", "last.ckpt"]  # no temp
