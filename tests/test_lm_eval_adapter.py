"""The lm-eval adapter: lm-eval's own pipeline on local task definitions (tests/fixtures/zeroshot/lm_eval_tasks) gives
gptlab's numbers, generation is greedy and stops where asked, and the command line runs a task end to end."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch
from helpers import CHECKOUT_ENV, ROOT, run_python, train_in_process
from lm_eval import simple_evaluate  # lm-eval is in the test extra (and the eval extra)
from lm_eval.api.instance import Instance
from lm_eval.tasks import TaskManager

from gptlab.data.tokenizers import ByteTokenizer
from gptlab.errors import ConfigError
from gptlab.eval.lm_eval_adapter import GptlabLM
from gptlab.eval.scoring import score_pairs, score_texts
from gptlab.eval.zeroshot import evaluate_tasks, load_examples

FIXTURES = ROOT / "tests" / "fixtures" / "zeroshot"
TASKS_DIR = FIXTURES / "lm_eval_tasks"
DATA = {"lambada": str(FIXTURES / "lambada.jsonl"), "hellaswag": str(FIXTURES / "hellaswag.jsonl")}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny 2-step run's checkpoint (block_size 128: HellaSwag's endings fit in bytes)."""
    out = tmp_path_factory.mktemp("run")
    train_in_process(out, "model.block_size=128", "trainer.max_steps=2", "trainer.val_check_interval=2", "~logger")
    return out / "checkpoints" / "last.ckpt"


@pytest.fixture(scope="module")
def lm(ckpt: Path) -> GptlabLM:
    return GptlabLM(ckpt_path=str(ckpt), batch_size="4", device="cpu")


def request(kind: str, *args: object) -> Instance:
    return Instance(request_type=kind, doc={}, arguments=tuple(args), idx=0)


def test_lm_eval_pipeline_gives_gptlabs_scores_and_metrics(lm: GptlabLM) -> None:
    """lm-eval builds the requests from the local YAML tasks; every log-likelihood and every metric equals what
    gptlab's own zero-shot code computes on the same rows."""
    results = simple_evaluate(model=lm, tasks=["gptlab_lambada_local", "gptlab_hellaswag_local"],
                              task_manager=TaskManager(include_path=str(TASKS_DIR)), log_samples=True)
    ours = evaluate_tasks(lm.model, lm.tokenizer, load_examples(["lambada", "hellaswag"], DATA))
    lambada, hellaswag = results["results"]["gptlab_lambada_local"], results["results"]["gptlab_hellaswag_local"]
    assert lambada["acc,none"] == pytest.approx(ours["lambada/acc"])
    assert lambada["perplexity,none"] == pytest.approx(ours["lambada/word_ppl"], rel=1e-5)  # lm-eval's is per word
    assert hellaswag["acc,none"] == pytest.approx(ours["hellaswag/acc"])
    assert hellaswag["acc_norm,none"] == pytest.approx(ours["hellaswag/acc_norm"])
    samples = results["samples"]["gptlab_lambada_local"] + results["samples"]["gptlab_hellaswag_local"]
    pairs = [tuple(args) for s in samples for args in s["arguments"]]
    logprobs = [resp[0][0] for s in samples for resp in s["resps"]]
    assert len(pairs) == 8 + 6 * 4
    for got, score in zip(logprobs, score_texts(lm.model, lm.tokenizer, pairs, batch_size=1)):
        assert got == pytest.approx(score.logprob, abs=1e-5)


def test_generate_until_is_greedy_and_stops_before_the_stop_string(lm: GptlabLM) -> None:
    context = "The storm came and the"
    prompt = torch.tensor([list(context.encode())])
    ids = lm.model.generate(prompt, 40, temperature=0.0)[0, prompt.shape[1]:].tolist()
    full = ByteTokenizer().decode(ids)
    stop = full[12]
    got = lm.generate_until([request("generate_until", context, {"until": [stop], "max_gen_toks": 40}),
                             request("generate_until", context, {"until": ["\x00never"], "max_gen_toks": 40}),
                             request("generate_until", context, {"max_gen_toks": 5})])
    assert got[0] == full[: full.index(stop)] and len(got[0]) <= 12
    assert got[1] == full.split("<|endoftext|>")[0]  # 40 tokens (two generate chunks), or up to end-of-text
    assert got[2] == ByteTokenizer().decode(ids[:5]).split("<|endoftext|>")[0]  # bytes: not always whole UTF-8


def test_loglikelihood_rolling_scores_every_token_after_end_of_text(lm: GptlabLM) -> None:
    text = "A short text that fits in one window."
    eot = lm.tokenizer.eot_id
    expected = score_pairs(lm.model, [([eot], list(text.encode()))])[0].logprob
    long_text = text * 10  # 370 bytes: three windows of block_size 128
    rolled = lm.loglikelihood_rolling([request("loglikelihood_rolling", text),
                                       request("loglikelihood_rolling", long_text)])
    assert rolled[0] == pytest.approx(expected, abs=1e-5)
    # every one of the 370 tokens scored exactly once: more than the first window alone, and finite
    first_window = score_pairs(lm.model, [([eot], list(long_text.encode())[:128])])[0].logprob
    assert math.isfinite(rolled[1]) and rolled[1] < first_window - 1


def test_bad_model_args_are_config_errors(ckpt: Path, tmp_path: Path, gpt2_ranks: Path) -> None:
    with pytest.raises(ConfigError, match="ckpt_path="):
        GptlabLM(ckpt_path=str(tmp_path / "missing.ckpt"))
    with pytest.raises(ConfigError, match="more than the model's vocab_size=257"):
        GptlabLM(ckpt_path=str(ckpt), tokenizer="gpt2", ranks_file=str(gpt2_ranks))


def test_command_line_runs_a_local_task_end_to_end(ckpt: Path, tmp_path: Path) -> None:
    done = run_python(
        [sys.executable, "-m", "gptlab.eval.lm_eval_adapter", "--model_args", f"ckpt_path={ckpt}", "--device", "cpu",
         "--tasks", "gptlab_lambada_local", "--include_path", str(TASKS_DIR), "--limit", "4",
         "--output_path", str(tmp_path / "out")], ROOT, CHECKOUT_ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "gptlab_lambada_local" in done.stdout and "acc" in done.stdout  # lm-eval's table
    written = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())
    acc = written["results"]["gptlab_lambada_local"]["acc,none"]
    assert 0.0 <= acc <= 1.0 and written["config"]["model"] == "gptlab"
