"""Messages that say what is true (issue 54, section 4): each refusal or note names what is really the matter, and
its way out works when typed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import compose_config, run_script, write_corpus

from gptlab.config.suggest import compose_message


@pytest.mark.parametrize("script", ["scripts/plan.py", "src/sample.py"])
def test_a_plus_on_a_key_the_config_has_says_to_drop_the_plus(script: str) -> None:
    """`+tokens=1e9` over plan.yaml's `tokens: null` was "tokens is not a key ... Did you mean tokenizer?"."""
    key = {"scripts/plan.py": "tokens=1e9", "src/sample.py": "top_k=3"}[script]
    proc = run_script(script, [f"+{key}"])
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert "is not a key" not in line and f"type {key} without the +" in line, line


def test_the_way_out_of_a_plus_on_an_existing_key_works_when_typed() -> None:
    proc = run_script("scripts/plan.py", ["model=gpt2_small", "tokens=1e9"])
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_plus_on_a_set_key_is_worded_as_gptlab_words_it() -> None:
    """Hydra's own "Could not append ... add a second +" for `+seed=3`: gptlab's one line, the same in every
    entry point."""
    with pytest.raises(Exception) as err:
        compose_config(["+seed=3"], config_name="plan")
    message = compose_message(err.value)
    assert message == ("seed is already a key of the config, and + adds a key it lacks: type seed=3 without the +."), \
        message


def test_prepare_data_prepares_a_mixture_source_by_source_where_training_reads_it(tmp_path: Path) -> None:
    """`prepare_data.py data=mixture_example data.store=prepared` said "a Mixture is read source by source
    (data.store=memory or prepared)" although prepared was given: each source's shards now go where
    gptlab.data.mixture_store's prepared parts read them, <data.cache_dir>/<source name>/<tokenizer>/."""
    import hydra

    from gptlab.apps.prepare_data import prepare_from_config
    from gptlab.data.prepare import prepared_dir

    cfg = compose_config(["data=mixture_example", "data.store=prepared", f"data.cache_dir={tmp_path / 'cache'}",
                          "data.num_proc=1"], config_name="prepare_data")
    for name, seed in (("pydocs", 1), ("python_stdlib", 2)):
        files = write_corpus(tmp_path / name, n_files=1, docs_per_file=40, seed=seed)
        cfg.data.source.sources[name].source = {"_target_": "gptlab.data.sources.TextFiles",
                                                "paths": [str(p) for p in files], "name": name}
    assert prepare_from_config(cfg) == tmp_path / "cache"
    tokenizer = hydra.utils.instantiate(cfg.tokenizer)
    for name in ("pydocs", "python_stdlib"):
        manifest = json.loads((prepared_dir(f"{tmp_path / 'cache'}/{name}", tokenizer) / "manifest.json").read_text())
        assert manifest["splits"]["train"]["tokens"] > 0


def recorded_sweep(tmp_path: Path, finished: bool = True) -> Path:
    """A 2-variant x 3-seed sweep as train.py -m leaves it, its launch recorded in sweep_config.json."""
    from test_report_stats import make_job

    sweep = tmp_path / "sweep"
    for index, (norm, seed) in enumerate((n, s) for n in ("pre", "post") for s in (1, 2, 3)):
        job = make_job(sweep, index, {"model.norm": norm, "seed": str(seed)}, [3.5, 3.0 + 0.01 * seed])
        if not finished:
            (job / "run_summary.json").unlink()
    (sweep / "sweep_config.json").write_text(json.dumps({"task_overrides": ["model.norm=pre,post", "seed=1,2,3"],
                                                         "swept": {}, "config": {}, "sweeper_params": {}}))
    return sweep


def test_a_report_on_a_sweep_that_finished_no_job_says_so_and_how_to_continue(tmp_path: Path) -> None:
    """It said "not a sweep dir of `train.py -m`" of a fused sweep killed before any job finished."""
    from gptlab.errors import ConfigError
    from gptlab.report.runs import write_report

    sweep = recorded_sweep(tmp_path, finished=False)
    with pytest.raises(ConfigError) as err:
        write_report(sweep)
    message = str(err.value)
    assert "not a sweep dir" not in message and "has finished yet" in message, message
    assert f"python src/train.py -m model.norm=pre,post seed=1,2,3 hydra.sweep.dir={sweep.resolve()}" in message


def test_a_report_names_a_job_missing_from_the_sweep_dir_and_the_command_that_runs_it(tmp_path: Path) -> None:
    """A sweep launched with seed=1,2,3 whose job 5 was deleted: the report said "Launch with seed=1,2,3"."""
    import shutil

    from gptlab.report.runs import write_report

    sweep = recorded_sweep(tmp_path)
    shutil.rmtree(sweep / "5")
    text = write_report(sweep)[0].read_text()
    assert "Launch with seed=1,2,3" not in text
    command = f"python src/train.py -m model.norm=pre,post seed=1,2,3 hydra.sweep.dir={sweep.resolve()}"
    assert "- model.norm=post, seed=3\n" in text and f"Run them with: {command}" in text, text
    assert "its job model.norm=post, seed=3 is missing from the sweep dir" in text


def test_the_loss_by_position_plot_bins_long_curves_and_keeps_short_ones() -> None:
    """The PNG drew raw per-position loss (noise bands at L=256); the CSV keeps every position."""
    from gptlab.eval.context_plot import POINTS, binned

    raw = [float(p % 7) for p in range(256)]
    xs, ys = binned(raw)
    assert len(xs) == len(ys) <= POINTS and xs[0] == 0.0 and ys[0] == raw[0]
    assert all(a < b for a, b in zip(xs, xs[1:])) and xs[-1] <= 255
    assert sum(ys[1:]) / len(ys[1:]) == pytest.approx(sum(raw[1:]) / 255, rel=0.05)
    assert binned(raw[:32]) == ([float(p) for p in range(32)], raw[:32])


def test_a_plus_on_a_group_the_defaults_choose_says_to_drop_the_plus() -> None:
    """`+tokenizer=gpt2` read Hydra's "To override a value use 'override tokenizer: gpt2'", a line of YAML."""
    with pytest.raises(Exception) as err:
        compose_config(["+model=gpt2_small"])
    message = compose_message(err.value)
    assert message == ("model is a config group the config already chooses, and + adds a group it lacks: type "
                       "model=gpt2_small without the +."), message
    compose_config(["model=gpt2_small"])  # the way out, typed
