"""logger=csv, wandb, mlflow and a list of them: one two-job sweep (Hydra's basic launcher: both jobs in one process)
logging to all four at once, and each logger holding what TensorBoard holds, with the real packages, offline."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest
import yaml
from helpers import TINY, compose_config, run_train
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from gptlab.config.validate import check
from gptlab.errors import ConfigError
from gptlab.report.job_scalars import read_scalars
from gptlab.report.logged_scalars import job_loggers, read_csv, read_mlflow, read_wandb, wandb_records
from gptlab.runs.logged_files import CSV_SAMPLES_FILE, CSV_WALL_TIME
from gptlab.runs.run_dir import TENSORBOARD_DIR, event_files

ALL = "logger=[tensorboard,csv,wandb,mlflow]"
W_AND_B_OWN = ("trainer/global_step",)  # what W&B's history adds to gptlab's scalars (besides its _-keys)
READERS = {"RunCSVLogger": read_csv, "RunMLFlowLogger": read_mlflow, "RunWandbLogger": read_wandb}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("loggers")
    sweep_dir = root / "sweep"
    args = ["-m", *TINY, ALL, "trainer.max_steps=4", "trainer.val_check_interval=2", "seed=1,2",
            f"hydra.sweep.dir={sweep_dir}", f"paths.log_dir={root / 'store'}"]
    proc = run_train(args, cwd=root, threads=1)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return sweep_dir


def _tensorboard(job: Path) -> EventAccumulator:
    (path,) = event_files(job)
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def _values(scalars: dict) -> dict[str, dict[int, float]]:
    return {tag: {step: value for step, (_, value) in points.items()} for tag, points in scalars.items()}


def _gptlab_tag(tag: str) -> bool:
    return not tag.startswith("_") and tag not in W_AND_B_OWN


@pytest.mark.parametrize("job", ["0", "1"])
def test_every_logger_holds_every_scalar_tensorboard_holds(sweep: Path, job: str) -> None:
    acc = _tensorboard(sweep / job)
    tensorboard = {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
    assert {"train/loss", "val/loss", "val-best/loss", "x_probes/z_loss"} <= set(tensorboard)
    loggers = job_loggers(sweep / job)
    for kind, read in READERS.items():
        got = _values(read(sweep / job, loggers[kind], _gptlab_tag))
        assert set(got) == set(tensorboard), kind  # no scalar lost, no `epoch` added
        for tag, points in tensorboard.items():  # TensorBoard keeps float32
            assert got[tag] == pytest.approx(points, rel=1e-6), (kind, tag)


def test_each_job_of_a_one_process_sweep_is_a_run_of_its_own(sweep: Path) -> None:
    """Hydra's basic launcher runs both jobs in one process: each still gets its own W&B and MLflow run (Lightning's
    W&B logger would hand the second job the first's run, still open)."""
    wandb_runs = [sorted((sweep / job / "wandb").glob("offline-run-*")) for job in ("0", "1")]
    assert [len(runs) for runs in wandb_runs] == [1, 1] and wandb_runs[0][0].name != wandb_runs[1][0].name
    from mlflow import MlflowClient

    loggers = job_loggers(sweep / "0")
    client = MlflowClient(loggers["RunMLFlowLogger"]["tracking_uri"])
    experiment = client.get_experiment_by_name(loggers["RunMLFlowLogger"]["experiment_name"])
    runs = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_name for r in runs) == ["seed=1", "seed=2"]  # named as TensorBoard names them
    assert {r.info.status for r in runs} == {"FINISHED"}
    assert sorted(r.data.tags["gptlab.run_dir"] for r in runs) == [str((sweep / j).resolve()) for j in ("0", "1")]
    artifacts = Path(client.get_run(runs[0].info.run_id).info.artifact_uri.removeprefix("file://"))
    assert artifacts.is_relative_to(sweep.parent / "store")  # beside the store, not ./mlruns of the launch dir
    assert not (sweep.parent / "mlruns").exists()


def _tensorboard_hparams(job: Path) -> dict[str, object]:
    content = _tensorboard(job).PluginTagToContent("hparams")
    session = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    return {k: getattr(v, v.WhichOneof("kind")) for k, v in session.hparams.items()}


def _wandb_config(job: Path) -> dict[str, object]:
    from wandb.proto import wandb_internal_pb2

    config: dict[str, object] = {}
    for data in wandb_records(next((job / "wandb").glob("offline-run-*/run-*.wandb"))):
        record = wandb_internal_pb2.Record.FromString(data)
        if record.WhichOneof("record_type") == "config":
            config.update({u.key: json.loads(u.value_json) for u in record.config.update if u.key})
    return config


def test_every_logger_holds_the_hyperparameters_of_the_hparams_tab(sweep: Path) -> None:
    job = sweep / "1"
    tensorboard = _tensorboard_hparams(job)
    assert tensorboard["seed"] == 2 and tensorboard["model.n_embd"] == 32 and tensorboard["check_memory"] is True
    csv_params = yaml.safe_load(next((job / "csv").rglob("hparams.yaml")).read_text())
    from mlflow import MlflowClient

    node = job_loggers(job)["RunMLFlowLogger"]
    client = MlflowClient(node["tracking_uri"])
    (run,) = client.search_runs([client.get_experiment_by_name(node["experiment_name"]).experiment_id],
                                f"tags.`gptlab.run_dir` = '{job.resolve()}'")
    wandb_config = {k: v for k, v in _wandb_config(job).items() if not k.startswith("_")}
    for name, params in (("csv", csv_params), ("wandb", wandb_config), ("mlflow", run.data.params)):
        assert set(params) == set(tensorboard), name  # the flat keys of the HParams tab, nothing nested
        for key, value in tensorboard.items():
            same = str(value) == str(params[key]) or (isinstance(value, float) and float(params[key]) == value)
            assert same, (name, key, value, params[key])


def _tensorboard_samples(job: Path) -> dict[tuple[str, int], str]:
    acc = _tensorboard(job)
    return {(tag.removesuffix("/text_summary"), e.step): e.tensor_proto.string_val[0].decode()
            for tag in acc.Tags()["tensors"] if tag.startswith("samples/") for e in acc.Tensors(tag)}


def test_every_logger_holds_the_text_samples(sweep: Path) -> None:
    job = sweep / "0"
    tensorboard = {key: text.replace("\n    ", "\n").removeprefix("    ")
                   for key, text in _tensorboard_samples(job).items()}  # TensorBoard's copy is indented
    assert sorted(tensorboard) == [("samples/0", 2), ("samples/0", 4), ("samples/1", 2), ("samples/1", 4)]
    with next((job / "csv").rglob(CSV_SAMPLES_FILE)).open(newline="") as f:
        assert {(r["tag"], int(r["step"])): r["text"] for r in csv.DictReader(f)} == tensorboard
    tables = {}
    for path in (job / "wandb").glob("offline-run-*/files/media/table/samples/*.table.json"):
        ((step, text),) = json.loads(path.read_text())["data"]
        tables[(f"samples/{path.name.split('_')[0]}", step)] = text
    assert tables == tensorboard
    from mlflow import MlflowClient

    node = job_loggers(job)["RunMLFlowLogger"]
    client = MlflowClient(node["tracking_uri"])
    (run,) = client.search_runs([client.get_experiment_by_name(node["experiment_name"]).experiment_id],
                                f"tags.`gptlab.run_dir` = '{job.resolve()}'")
    got = {(tag, int(Path(a.path).stem.removeprefix("step_"))): client.download_artifacts(run.info.run_id, a.path)
           for tag in ("samples/0", "samples/1") for a in client.list_artifacts(run.info.run_id, tag)}
    assert {key: Path(path).read_text() for key, path in got.items()} == tensorboard


def test_the_report_reads_a_job_without_tensorboard_events_from_its_other_loggers(sweep: Path) -> None:
    """With the events moved away, read_scalars reads the CSV logger's, with the times each row was logged."""
    job = sweep / "0"
    want = _values(read_scalars(job)[0])
    aside = sweep / "tensorboard-aside"
    (job / TENSORBOARD_DIR).rename(aside)
    try:
        scalars, start = read_scalars(job)
    finally:
        aside.rename(job / TENSORBOARD_DIR)
    assert _values(scalars).keys() == want.keys() and want["val/loss"]
    assert all(_values(scalars)[tag] == pytest.approx(points) for tag, points in want.items())
    assert start is not None and all(start <= wall for points in scalars.values() for wall, _ in points.values())
    with next((job / "csv").rglob("metrics.csv")).open(newline="") as f:
        assert all(float(row[CSV_WALL_TIME]) > 0 for row in csv.DictReader(f))


def test_a_job_logged_to_wandb_online_only_is_refused_with_the_logger_to_add(tmp_path: Path) -> None:
    (tmp_path / "config_resolved.yaml").write_text(yaml.safe_dump(
        {"logger": {"wandb": {"_target_": "gptlab.train.run_loggers.RunWandbLogger", "offline": False}}}))
    with pytest.raises(ConfigError, match=r"logger=\[wandb,tensorboard\]"):
        read_scalars(tmp_path)


def test_a_logger_whose_package_is_missing_is_one_line_with_the_install_command(monkeypatch, tmp_path: Path) -> None:
    cfg = compose_config(["logger=[tensorboard,mlflow]"], tmp_path)
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "mlflow" else real(name, *a))
    with pytest.raises(ConfigError) as err:
        check(cfg, overrides=[])
    said = str(err.value)
    assert said.startswith("logger.mlflow needs the mlflow package") and "pip install mlflow" in said
    assert "\n" not in said


def test_the_default_install_does_not_bring_wandb_or_mlflow() -> None:
    import tomllib

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    names = [dep.split(">")[0].split("=")[0].split("<")[0].strip() for dep in project["dependencies"]]
    assert not {"wandb", "mlflow"} & set(names)
    assert project["optional-dependencies"]["wandb"] and project["optional-dependencies"]["mlflow"]
