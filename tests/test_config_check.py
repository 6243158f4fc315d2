"""Typed configs: bad values in every group exit 2 naming the field, print no traceback and leave no run dir.

The table runs in-process along the path `python src/train.py` takes: Hydra composes (its errors worded by
gptlab.config.entry), then `user_errors_exit(train)` checks (60 subprocesses would cost minutes); a few real
subprocess runs check the entry point end to end (tests/test_config_schemas.py has more).
"""

from __future__ import annotations

import pytest
from helpers import TINY, compose_config, run_train

from gptlab.apps.train import train
from gptlab.config.entry import exit_if_compose_error
from gptlab.config.validate import check
from gptlab.launch.cli import user_errors_exit

# (override, the field the message must name). Each override alone makes the config invalid. Unwritable paths are
# below /dev/null (a file), since root, which CI may run as, may write anywhere else.
BAD_VALUES = [
    # model: every kind of field, checked from GPTConfig's annotations
    ("model.tie_weights=maybe", "model.tie_weights"),
    ("model.tie_weights=no", "model.tie_weights"),
    ("model.tie_weights=off", "model.tie_weights"),
    ("model.tie_weights=1", "model.tie_weights"),
    ("model.attn_bias=yes", "model.attn_bias"),
    ("model.mlp_bias=0", "model.mlp_bias"),
    ("runtime.compile=sometimes", "runtime.compile"),
    ("runtime.activation_checkpointing=on", "runtime.activation_checkpointing"),
    ("model.final_norm=maybe", "model.final_norm"),
    ("model.qkv_bias=2", "model.qkv_bias"),
    ("model.n_layer=2.5", "model.n_layer"),
    ("model.n_layer=0", "model.n_layer"),
    ("model.n_head=four", "model.n_head"),
    ("model.n_embd=-128", "model.n_embd"),
    ("model.n_embd=33", "model.n_embd"),  # not divisible by n_head=2
    ("model.block_size=0", "model.block_size"),
    ("model.block_size=true", "model.block_size"),
    ("model.vocab_size=-1", "model.vocab_size"),
    ("model.head_dim=0", "model.head_dim"),
    ("model.d_ff=1.5", "model.d_ff"),
    ("model.mlp_layers=0", "model.mlp_layers"),
    ("model.dropout=1.5", "model.dropout"),
    ("model.dropout=high", "model.dropout"),
    ("model.layer_norm_eps=0", "model.layer_norm_eps"),
    ("model.norm=sideways", "model.norm"),
    ("model.pos_emb=rotary-ish", "model.pos_emb"),
    ("model.activation=swish", "model.activation"),
    ("model.attn_pattern=dense", "model.attn_pattern"),
    ("model.attn_pattern=[dense,wide]", "model.attn_pattern"),
    ("model.attn_window=0", "model.attn_window"),
    ("model.attn_impl=cuda", "model.attn_impl"),
    ("model.attn_scale=-1", "model.attn_scale"),
    ("model.pad_vocab_to=0", "model.pad_vocab_to"),
    ("+model.n_layers=4", "n_layers"),
    ("model.block_size=100000000", "model.block_size"),  # the memory guard: ~10^4 GB of activations
    # tokenizer
    ("tokenizer=gpt2 tokenizer.encoding=gpt5", "tokenizer.encoding"),
    ("tokenizer=gpt2 tokenizer.ranks_file=/nonexistent/gpt2.tiktoken", "tokenizer.ranks_file"),
    ("tokenizer=gpt2 tokenizer.ranks_file=''", "tokenizer.ranks_file"),
    # data
    ("data.batch_size=0", "data.batch_size"),
    ("data.batch_size=8.5", "data.batch_size"),
    ("data.val_fraction=0", "data.val_fraction"),
    ("data.val_fraction=1.2", "data.val_fraction"),
    ("data.num_workers=-1", "data.num_workers"),
    ("data.samples_per_epoch=0", "data.samples_per_epoch"),
    ("data.seed=-3", "data.seed"),
    ("data=text_files data.store=disk", "data.store"),
    ("data=text_files data.sampling=shuffled", "data.sampling"),
    ("data=text_files data.shard_tokens=0", "data.shard_tokens"),
    ("data=text_files data.verify_sha256=no", "data.verify_sha256"),
    ("data=text_files data.num_proc=0", "data.num_proc"),
    # optimizer
    ("optimizer.lr=-0.1", "optimizer.lr"),
    ("optimizer.lr=0", "optimizer.lr"),
    ("optimizer.lr=fast", "optimizer.lr"),
    ("optimizer.eps=0", "optimizer.eps"),
    ("optimizer.betas=[0.9]", "optimizer.betas"),
    ("optimizer.betas=[0.9,1.5]", "optimizer.betas"),
    ("optimizer.weight_decay=-0.1", "optimizer.weight_decay"),
    ("optimizer.fused=perhaps", "optimizer.fused"),
    ("optimizer=sgd optimizer.momentum=1.5", "optimizer.momentum"),
    ("optimizer=sgd optimizer.nesterov=yes", "optimizer.nesterov"),
    # scheduler
    ("scheduler.warmup_steps=-5", "scheduler.warmup_steps"),
    ("scheduler.warmup_steps=2.5", "scheduler.warmup_steps"),
    ("scheduler.min_lr_ratio=2", "scheduler.min_lr_ratio"),
    ("scheduler=wsd scheduler.decay_fraction=1.5", "scheduler.decay_fraction"),
    # trainer
    ("trainer.devices=0", "trainer.devices"),
    ("trainer.devices=-2", "trainer.devices"),
    ("trainer.devices=two", "trainer.devices"),
    ("trainer.num_nodes=0", "trainer.num_nodes"),
    ("trainer.precision=8-bit", "trainer.precision"),
    ("trainer.precision=16", "trainer.precision"),
    ("trainer.max_steps=0", "trainer.max_steps"),
    ("trainer.max_steps=-1", "trainer.max_steps"),
    ("trainer.max_steps=10.5", "trainer.max_steps"),
    ("trainer.val_check_interval=0", "trainer.val_check_interval"),
    ("trainer.val_check_interval=1.5", "trainer.val_check_interval"),
    ("trainer.limit_val_batches=-1", "trainer.limit_val_batches"),
    ("trainer.log_every_n_steps=0", "trainer.log_every_n_steps"),
    ("trainer.gradient_clip_val=-1", "trainer.gradient_clip_val"),
    ("trainer.accumulate_grad_batches=0", "trainer.accumulate_grad_batches"),
    ("trainer.accelerator=tpu9", "trainer.accelerator"),
    ("trainer.deterministic=maybe", "trainer.deterministic"),
    ("trainer.fast_dev_run=-1", "trainer.fast_dev_run"),
    ("trainer.enable_model_summary=yes", "trainer.enable_model_summary"),
    ("trainer.accelerator=gpu", "trainer.devices"),  # no GPU here: the device guard
    # callbacks
    ("callbacks.periodic_checkpoint.every_n_train_steps=-1", "callbacks.periodic_checkpoint.every_n_train_steps"),
    ("callbacks.model_checkpoint.save_top_k=-2", "callbacks.model_checkpoint.save_top_k"),
    ("callbacks.model_checkpoint.mode=lowest", "callbacks.model_checkpoint.mode"),
    ("callbacks.throughput.window_size=0", "callbacks.throughput.window_size"),
    ("callbacks.text_samples.max_new_tokens=-1", "callbacks.text_samples.max_new_tokens"),
    ("callbacks.text_samples.temperature=-0.5", "callbacks.text_samples.temperature"),
    ("callbacks.text_samples.top_k=0", "callbacks.text_samples.top_k"),
    ("callbacks.progress_bar.refresh_rate=-1", "callbacks.progress_bar.refresh_rate"),
    ("callbacks.throughput=5", "callbacks.throughput"),
    # top level and paths
    ("seed=-1", "seed"),
    ("seed=abc", "seed"),
    ("global_batch_tokens=0", "global_batch_tokens"),
    ("global_batch_tokens=1000", "global_batch_tokens"),  # not a multiple of micro-batch x block_size
    ("label_smoothing=1.0", "label_smoothing"),
    ("resume=always", "resume"),
    ("ckpt_path=/nonexistent/last.ckpt", "ckpt_path"),
    ("print_config=yes", "print_config"),
    ("check_memory=off", "check_memory"),
    ("float32_matmul_precision=low", "float32_matmul_precision"),
    ("name=''", "name"),
    ("paths.log_dir=''", "paths.log_dir"),
    ("paths.log_dir=/dev/null/outputs", "paths.log_dir"),  # cannot be created
    ("data=text_files data.cache_dir=/dev/null/cache", "data.cache_dir"),
]


def test_the_table_is_big_and_spans_every_group() -> None:
    assert len(BAD_VALUES) >= 60
    groups = {field.split(".")[0] for _, field in BAD_VALUES}
    assert {"model", "data", "tokenizer", "optimizer", "scheduler", "trainer", "callbacks", "paths"} <= groups


@pytest.mark.parametrize("override,field", BAD_VALUES, ids=[o for o, _ in BAD_VALUES])
def test_bad_value_exits_2_naming_the_field(tmp_path, capsys, monkeypatch, override: str, field: str) -> None:
    monkeypatch.setattr("gptlab.preflight.guards.gpu_count", lambda: 0)

    def fit(*args, **kwargs):
        raise AssertionError(f"{override} passed every check and reached Trainer.fit")

    monkeypatch.setattr("lightning.Trainer.fit", fit)
    log_dir = tmp_path / "outputs"
    run_dir = log_dir / "runs" / "train" / "2026-01-01" / "00-00-00"
    overrides = override.split(" ")
    keys = [o.split("=")[0].lstrip("+~") for o in overrides]
    base = [t for t in TINY if not any(k.startswith(t.split("=")[0]) for k in keys)]  # the override's own value wins
    overrides = [*base, f"paths.log_dir={log_dir}", *overrides]
    monkeypatch.setattr("gptlab.config.validate.hydra_overrides", lambda: overrides)  # what Hydra records of them
    with pytest.raises(SystemExit) as exit_info:
        try:
            cfg = compose_config(overrides, run_dir)
        except Exception as compose_error:
            exit_if_compose_error(compose_error)
            raise
        (run_dir / ".hydra").mkdir(parents=True)  # what Hydra has created by the time train() runs
        (run_dir / "train.log").write_text("")
        user_errors_exit(train)(cfg)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2, err
    assert err.startswith("gptlab: error: ") and field in err, err
    assert "Traceback" not in err
    # Refused at compose: nothing was made. Refused by train(): it did not create that dir (Hydra would have, and
    # now refuses before it does: test_run_dir_safety.py), so it stays exactly as it was: gptlab removes only what it
    # created itself.
    assert not run_dir.exists() or sorted(p.name for p in run_dir.iterdir()) == [".hydra", "train.log"]


def test_good_configs_pass() -> None:
    for overrides in ([], ["model=gpt2_small"], ["optimizer=sgd", "scheduler=wsd"], ["trainer=fsdp"],
                      ["experiment=gpt3_small_fineweb"], ["data=text_files", "tokenizer=gpt2"], ["debug=fast_dev_run"],
                      ["model.tie_weights=false", "model.final_norm=null", "trainer.val_check_interval=0.5"]):
        check(compose_config(overrides, "/tmp/unused"), overrides)


def test_entry_point_refuses_and_leaves_no_run_dir(tmp_path) -> None:
    """The real `python src/train.py`: refused before Hydra creates anything. One subprocess (imports cost ~8 s)."""
    proc = run_train(["model.tie_weights=maybe", f"paths.log_dir={tmp_path / 'outputs'}"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "gptlab: error: model.tie_weights='maybe'" in proc.stderr and "Traceback" not in proc.stderr
    assert [p.name for p in tmp_path.iterdir()] == []  # refused before Hydra made outputs/ or a run dir
