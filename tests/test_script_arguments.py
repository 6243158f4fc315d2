"""Every script in scripts/ refuses a bad argument as the config refuses a bad value (issue 54): one `gptlab: error:`
line that names the argument, exit 2, no traceback, and nothing written where it ran. The scripts are found by
listing scripts/, so a new script fails here until BAD gives it its bad cases. Each runs forked from the suite's
zygote (helpers.run_script): the bad values are refused while parsing, before any work or heavy import is done."""

from __future__ import annotations

from pathlib import Path

import pytest
import ways_out
from helpers import ROOT, compose_config, run_script

from gptlab.errors import ConfigError
from gptlab.launch import arguments

SCRIPTS = sorted(p.name for p in (ROOT / "scripts").glob("*.py"))

# script -> (arguments, what the line must name). {tmp}: an empty dir; {file}: a file; {missing}: a path that is
# not there. A GPU that no machine has (cuda:99) stands for "a device this machine lacks" on CPU and GPU hosts alike.
BAD: dict[str, list[tuple[list[str], str]]] = {
    "ablation_report.py": [(["{tmp}", "--alpha", "nan"], "--alpha"), (["{tmp}", "--boot", "5"], "--boot"),
                           (["{tmp}", "--x", "bogus"], "--x"), (["{tmp}", "--context", "0"], "--context"),
                           (["{tmp}", "--margin", "-0.005"], "--margin"), (["{tmp}", "--alpah", "0.1"], "--alpha"),
                           (["{tmp}", "--json", "--context", "64"], "--context")],
    "bench_attention.py": [(["--window", "0"], "--window"), (["--repeats", "0"], "--repeats"),
                           (["--device", "cuda:99"], "--device"), (["--lengths", "1024", "-5"], "--lengths"),
                           (["--model-width", "100"], "--model-width"), (["--kinds", "dense"], "--kinds")],
    "bench_data.py": [(["--steps", "-1", "--batches", "0"], "--steps"), (["--batches", "0"], "--batches")],
    "bench_document_masking.py": [(["--doc-len", "0"], "--doc-len"), (["--patterns", "sparse"], "--patterns"),
                                  (["--threads", "-1"], "--threads")],
    "bench_fused.py": [(["--ks", "0"], "--ks"), (["--device", "cuda:99"], "--device"),
                       (["--model", "huge"], "--model")],
    "bench_generate.py": [(["new_tokens=-1"], "new_tokens"), (["device=cuda:99"], "device"),
                          (["prompt_len=16", "new_tokens=4096"], "model.block_size")],
    "bench_prepare.py": [(["0"], "counts"), (["--mib", "0"], "--mib"), (["--tokenizer", "nope"], "--tokenizer"),
                         (["--tokenizer", "bytes", "--dir", "{file}"], "--dir")],
    "bench_prepare_memory.py": [(["0"], "sizes_mib"), (["1", "--num-proc", "0"], "--num-proc"),
                                (["1", "--dir", "{file}"], "--dir")],
    "bench_startup.py": [(["--repeats", "0"], "--repeats"), (["--repeats", "-2"], "--repeats")],
    "bench_threads.py": [(["--rounds", "0"], "--rounds"), (["--steps", "nan"], "--steps")],
    "bench_toggles.py": [(["--batch", "0"], "--batch"), (["--variants", "nope"], "--variants")],
    "bench_train.py": [(["--device", "cuda:99"], "--device"), (["--steps", "0"], "--steps"),
                       (["--parts", "nope"], "--parts")],
    "bench_train_memory.py": [([""], "train.py overrides"), (["trainer.accelerator=cpu model.n_layer=-1"], "n_layer"),
                              (["nokey"], "train.py overrides")],
    "campaign.py": [(["init", "c", "--baseline-sweep", "{missing}"], "--baseline-sweep"),
                    (["init", "c", "--baseline-sweep", "{tmp}", "--q", "1.5"], "--q"),
                    (["confirm", "c", "--variant", "v", "--seeds", "1"], "--seeds"), (["launch"], "command")],
    "check_tensorboard_view.py": [(["{missing}"], "logdir"), (["{file}"], "logdir")],
    "convert_checkpoint.py": [(["{tmp}", "{file}"], "out")],
    "coord_check.py": [(["--steps", "-1"], "--steps"), (["--out", "{file}/plot.png"], "--out"),
                       (["--widths", "64"], "--widths"), (["--lr", "inf"], "--lr"),
                       (["--widths", "6", "8"], "--widths")],
    "count_params.py": [(["model.n_layer=0"], "model.n_layer"), (["model=nope"], "model=nope")],
    "doctor.py": [(["--device", "cpu", "--attention-T", "-5"], "--attention-T"), (["--repeats", "0"], "--repeats"),
                  (["--device", "cuda:99"], "--device")],
    "export_hf.py": [(["ckpt_path={missing}", "out={file}"], "out")],
    "fault_drill.py": [(["--kills", "-1"], "--kills"), (["--kills", "-1", "--workdir", "{missing}"], "--workdir"),
                       (["--workdir", "{missing}"], "--workdir"), (["--workdir", "{file}"], "--workdir"),
                       (["--aimed", "1.5"], "--aimed")],
    "fetch_gpt2_ranks.py": [(["--cache-dir", "{file}"], "--cache-dir")],
    "gen_config_docs.py": [(["--chek"], "--check")],
    "gpu_check.py": [(["--device", "cpu"], "--tiny"), (["--budget", "-1"], "--budget"),
                     (["--parts", "nope"], "--parts")],
    "measure_doc_times.py": [(["--keys", "nope"], "--keys"), (["--chek"], "--check")],
    "mup_transfer_plot.py": [(["{tmp}", "--out", "{file}"], "--out")],
    "plan.py": [(["tokens=-5"], "tokens"), (["tokens=1e9", "trainer.devices=0"], "trainer.devices")],
    "preemption_drill.py": [(["--repeats", "0"], "--repeats"), (["--deadline", "nan"], "--deadline"),
                            (["--workdir", "{missing}"], "--workdir")],
    "prepare_data.py": [(["data.num_proc=0"], "data.num_proc")],
    "sequential_sweep.py": [(["{tmp}/seq", "--start", "1", "--", "x=1"], "--start"),
                            (["{tmp}/seq", "--start", "5", "--budget", "3", "--", "x=1"], "--budget"),
                            (["{tmp}/seq", "--alpha", "0", "--", "x=1"], "--alpha")],
}


def test_every_script_has_its_bad_cases() -> None:
    assert sorted(BAD) == SCRIPTS, f"give each new script its bad arguments in BAD: {sorted(set(SCRIPTS) - set(BAD))}"


def listing(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("script", SCRIPTS)
def test_bad_arguments_are_one_line_and_exit_2(script: str, tmp_path: Path) -> None:
    here, given = tmp_path / "cwd", tmp_path / "given"
    here.mkdir()
    (given / "empty").mkdir(parents=True)
    (given / "a_file").write_text("not a dir\n")
    places = {"{tmp}": str(given / "empty"), "{file}": str(given / "a_file"), "{missing}": str(given / "missing")}
    before = listing(tmp_path)
    for args, named in BAD[script]:
        typed = [next((arg.replace(k, v) for k, v in places.items() if k in arg), arg) for arg in args]
        proc = run_script(f"scripts/{script}", typed, cwd=here)
        lines = proc.stderr.strip().splitlines()
        said = f"{script} {' '.join(typed)} ->\n{proc.stderr[-2000:]}"
        assert proc.returncode == 2, said
        assert len(lines) == 1 and lines[0].startswith("gptlab: error: ") and named in lines[0], said
        assert listing(tmp_path) == before, f"{said}\nleft behind: {listing(tmp_path) - before}"


def test_every_refusal_of_the_scripts_modules_is_reached(tmp_path: Path, monkeypatch) -> None:
    """Each `raise` of a user error in ways_out.AREAS["test_script_arguments.py"] is reached here, in this process
    (the cases above run in forks, whose raise sites are not seen); the GPT-2 ranks missing among them."""
    from gptlab.data import tokenizers
    from gptlab.tools.benchmarks import generate, train_memory

    reached = set()

    def reach(fn, *args) -> str:  # type: ignore[no-untyped-def]
        try:
            fn(*args)
        except Exception as err:  # noqa: BLE001 - as_refusal raises anything but a user error again
            refused = ways_out.as_refusal(err)
            reached.add(refused.site)
            return refused.message
        raise AssertionError(f"{fn.__name__}{args} is not refused")

    (tmp_path / "a_file").write_text("x")
    assert "mkdir -p" in reach(arguments.existing_dir.value, "--workdir", str(tmp_path / "missing"))
    assert "--workdir=" in reach(arguments.existing_dir.value, "--workdir", str(tmp_path / "a_file"))
    assert "--out=" in reach(arguments.writable_file.value, "--out", str(tmp_path / "a_file" / "plot.png"))

    def no_ranks(self, encoding: str = "gpt2", ranks_file=None) -> None:  # type: ignore[no-untyped-def]
        raise ConfigError("tiktoken could not download the ranks")

    monkeypatch.setattr(tokenizers.TiktokenTokenizer, "__init__", no_ranks)
    said = reach(arguments.tokenizer.value, "--tokenizer", "gpt2")
    assert "scripts/fetch_gpt2_ranks.py" in said and "--tokenizer=bytes" in said
    assert "new_tokens=1008" in reach(generate.run, compose_config(["prompt_len=16", "new_tokens=4096"],
                                                                   config_name="bench_generate"))
    assert "model.n_layer" in reach(train_memory.estimate, ["model.nlayer=3"])
    missing = ways_out.unreached(reached, {}, ways_out.AREAS[Path(__file__).name])
    assert not missing, "raises no case reaches:\n" + "\n".join(missing)
