"""Zero-shot LAMBADA and HellaSwag: the batched scorer against a plain per-example loop over the model's logits,
the tasks' preprocessing, eval.py tasks= end to end, and the ZeroShotEval callback in a tiny run."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import ROOT, compose_config, run_script, scalars, train_in_process
from omegaconf import OmegaConf

from gptlab.apps.evaluate import evaluate
from gptlab.checkpoint.reader import load_model
from gptlab.config.validate import check_node
from gptlab.data.tokenizers import ByteTokenizer
from gptlab.errors import ConfigError
from gptlab.eval.scoring import encode_pair, score_pairs, score_texts
from gptlab.eval.tasks import hellaswag_example, task_examples
from gptlab.eval.zeroshot import evaluate_tasks, hellaswag_metrics, lambada_metrics, load_examples
from gptlab.model import GPT, GPTConfig
from gptlab.train.callbacks import ZeroShotEval

FIXTURES = ROOT / "tests" / "fixtures" / "zeroshot"
LAMBADA = FIXTURES / "lambada.jsonl"
HELLASWAG = FIXTURES / "hellaswag.jsonl"
TOK = ByteTokenizer()


@pytest.fixture(scope="module")
def model() -> GPT:
    """A random tiny GPT whose block_size (128 bytes) is shorter than most fixture passages: truncation is exercised."""
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=TOK.vocab_size, block_size=128, n_layer=2, n_head=2, n_embd=32)).eval()


def reference_score(model: GPT, context: str, continuation: str) -> tuple[float, bool]:
    """Sum log p of the continuation's bytes and whether greedy decoding reproduces it: one forward per example,
    the context left-truncated so context + continuation fit in block_size."""
    ctx, cont = list(context.encode()), list(continuation.encode())
    keep = model.config.block_size + 1 - len(cont)
    ids = ctx[-keep:] + cont
    with torch.no_grad():
        logits = model(torch.tensor([ids[:-1]]))[0, :, : TOK.vocab_size]
    logprobs = torch.log_softmax(logits.double(), dim=-1)
    total, greedy = 0.0, True
    for j, token in enumerate(cont):
        position = len(ids) - 1 - len(cont) + j  # the position whose output predicts cont[j]
        total += float(logprobs[position, token])
        greedy &= int(logprobs[position].argmax()) == token
    return total, greedy


def test_lambada_metrics_equal_a_per_example_loop(model: GPT) -> None:
    examples = task_examples("lambada", str(LAMBADA))
    assert examples[0].continuations == [" lighthouse"] and examples[0].context.endswith("beam from the")
    refs = [reference_score(model, ex.context, ex.continuations[0]) for ex in examples]
    scores = score_texts(model, TOK, [(ex.context, ex.continuations[0]) for ex in examples], batch_size=3)
    for score, (logprob, greedy) in zip(scores, refs):
        assert score.logprob == pytest.approx(logprob, abs=1e-5) and score.greedy == greedy
    n_tokens = sum(len(ex.continuations[0].encode()) for ex in examples)
    nll = -sum(lp for lp, _ in refs)
    metrics = lambada_metrics(model, TOK, examples, batch_size=3)
    assert metrics["acc"] == sum(g for _, g in refs) / len(refs)
    assert metrics["ppl"] == pytest.approx(math.exp(nll / n_tokens), rel=1e-5)  # per target token
    assert metrics["word_ppl"] == pytest.approx(math.exp(nll / len(refs)), rel=1e-5)  # per passage's last word


def test_greedy_is_the_argmax_at_every_continuation_token(model: GPT) -> None:
    prompt = torch.tensor([list(b"The storm came and the")])
    out = model.generate(prompt, 4, temperature=0.0)[0].tolist()
    context, greedy_cont = out[:-4], out[-4:]
    wrong_last = greedy_cont[:-1] + [(greedy_cont[-1] + 1) % 256]
    wrong_first = [(greedy_cont[0] + 1) % 256] + greedy_cont[1:]
    scores = score_pairs(model, [(context, greedy_cont), (context, wrong_last), (context, wrong_first)])
    assert [s.greedy for s in scores] == [True, False, False]
    assert scores[0].logprob > scores[1].logprob


def test_scores_do_not_depend_on_batching_and_truncate_the_context(model: GPT) -> None:
    long_context = list(range(50, 250)) * 2  # 400 ids, far beyond block_size=128
    pairs = [(long_context, [10, 20, 30]), ([7], [1, 2]), (long_context[:40], [99]), (long_context, [5] * 128)]
    one_by_one = score_pairs(model, pairs, batch_size=1)
    batched = score_pairs(model, pairs, batch_size=4)
    for a, b in zip(one_by_one, batched):
        assert a.logprob == pytest.approx(b.logprob, abs=1e-5) and a.greedy == b.greedy
    cut = score_pairs(model, [(long_context[-(128 + 1 - 3):], [10, 20, 30])])[0]  # what left-truncation keeps
    assert cut.logprob == pytest.approx(one_by_one[0].logprob, abs=1e-5)
    with pytest.raises(ConfigError, match=r"is longer than the model.s context \(128 tokens\)"):
        score_pairs(model, [([1], [5] * 129)])


def test_encode_pair_moves_trailing_space_and_gives_an_empty_context_end_of_text() -> None:
    assert encode_pair(TOK, "ab ", "c") == ([97, 98], [32, 99])
    assert encode_pair(TOK, "", "c") == ([TOK.eot_id], [99])


def test_hellaswag_preprocessing_and_metrics_equal_a_per_example_loop(model: GPT) -> None:
    examples = task_examples("hellaswag", str(HELLASWAG))
    assert examples[0].context == ("Removing ice from car: Then, the man writes over the snow covering the window of a "
                                   "car, and a woman wearing winter clothes smiles. Then")
    assert examples[0].continuations[3] == " , the man continues removing the snow on his car."
    assert examples[0].label == 3
    cactus = examples[2]  # WikiHow markup: " [title]" ends a sentence, other [tags] go
    assert cactus.context == "Home and Garden: How to water a cactus. Check the soil."
    assert cactus.continuations[1] == "  Paint the pot red every morning."
    right = right_norm = 0
    for ex in examples:
        lps = [reference_score(model, ex.context, c)[0] for c in ex.continuations]
        norm = [lp / len(c[1:]) for lp, c in zip(lps, ex.continuations)]  # characters of the ending, not its space
        right += lps.index(max(lps)) == ex.label
        right_norm += norm.index(max(norm)) == ex.label
    metrics = hellaswag_metrics(model, TOK, examples, batch_size=5)
    assert metrics == {"acc": right / len(examples), "acc_norm": right_norm / len(examples)}


def test_hellaswag_rows_without_ctx_a_use_ctx() -> None:
    ex = hellaswag_example({"ctx": "A cat sits.", "endings": ["a", "b"], "label": "1"})
    assert (ex.context, ex.continuations, ex.label) == ("A cat sits.", [" a", " b"], 1)


def test_limit_and_data_errors_name_the_task_and_what_to_do(tmp_path: Path) -> None:
    assert len(load_examples(["lambada"], {"lambada": str(LAMBADA)}, limit=3)["lambada"]) == 3
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "part.jsonl").write_text(LAMBADA.read_text())
    assert len(load_examples(["lambada"], {"lambada": str(tmp_path / "d")})["lambada"]) == 8  # a dir of .jsonl
    with pytest.raises(ConfigError, match=r"tasks=\['lambada', 'piqa'\] has unknown task\(s\) \['piqa'\]; the known "
                                          r"tasks are: lambada, hellaswag"):
        load_examples(["lambada", "piqa"])
    with pytest.raises(ConfigError, match=r"task 'lambada': could not read the local file or dir '/no/such.jsonl'.*"
                                          r"task_data.lambada="):
        load_examples(["lambada"], {"lambada": "/no/such.jsonl"})
    # conftest sets HF_HUB_OFFLINE=1: the Hub is out of reach, as on an air-gapped machine
    with pytest.raises(ConfigError, match=r"task 'hellaswag': could not read the Hugging Face Hub dataset "
                                          r"'Rowan/hellaswag'.*task_data.hellaswag=.*without a network"):
        load_examples(["hellaswag"])
    with pytest.raises(ConfigError, match=r"task_limit=0 must be a "):
        load_examples(["lambada"], {"lambada": str(LAMBADA)}, limit=0)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny 4-step run with callbacks.zero_shot scoring LAMBADA every 2 steps, block_size 128 so HellaSwag's
    endings fit in bytes."""
    out = tmp_path_factory.mktemp("run")
    train_in_process(out, "model.block_size=128", "trainer.max_steps=4", "trainer.val_check_interval=4",
                     "callbacks.zero_shot.tasks=[lambada]", "callbacks.zero_shot.every_n_steps=2",
                     "callbacks.zero_shot.limit=5", f"callbacks.zero_shot.data.lambada={LAMBADA}")
    return out


def test_callback_logs_lambada_metrics_of_the_model_at_that_step(run_dir: Path) -> None:
    logged = scalars(run_dir)
    assert set(logged["zero_shot/lambada/acc"]) == {2, 4} and set(logged["zero_shot/lambada/ppl"]) == {2, 4}
    assert set(logged["zero_shot/lambada/word_ppl"]) == {2, 4}
    model, _ = load_model(run_dir / "checkpoints" / "last.ckpt")  # the weights after step 4
    examples = load_examples(["lambada"], {"lambada": str(LAMBADA)}, limit=5)
    expected = evaluate_tasks(model, TOK, examples)
    assert logged["zero_shot/lambada/ppl"][4] == pytest.approx(expected["lambada/ppl"], rel=1e-5)
    assert logged["zero_shot/lambada/acc"][4] == pytest.approx(expected["lambada/acc"])
    assert logged["zero_shot/lambada/ppl"][2] != logged["zero_shot/lambada/ppl"][4]  # scored twice, other weights


def test_eval_script_scores_tasks_and_writes_them_to_eval_json(run_dir: Path, tmp_path: Path) -> None:
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    out = tmp_path / "eval"
    done = run_script("src/eval.py", [f"ckpt_path={ckpt}", "tasks=[lambada,hellaswag]", f"task_data.lambada={LAMBADA}",
                                      f"task_data.hellaswag={HELLASWAG}", "task_limit=4", "trainer.accelerator=cpu",
                                      "trainer.limit_val_batches=2", f"hydra.run.dir={out}"], check=True)
    written = json.loads((out / "eval.json").read_text())
    assert {"val/loss", "lambada/acc", "lambada/ppl", "lambada/word_ppl", "hellaswag/acc",
            "hellaswag/acc_norm"} <= set(written)
    assert written["lambada/n"] == 4 and written["hellaswag/n"] == 4
    assert re.search(r"hellaswag +4 +acc 0\.\d{4}  acc_norm", done.stdout)  # the table
    model, _ = load_model(ckpt)
    examples = load_examples(["lambada", "hellaswag"], {"lambada": str(LAMBADA), "hellaswag": str(HELLASWAG)}, 4)
    expected = evaluate_tasks(model, TOK, examples)
    for key, value in expected.items():
        assert written[key] == pytest.approx(value, rel=1e-6), key


def test_eval_script_missing_data_is_one_message(run_dir: Path, tmp_path: Path) -> None:
    done = run_script("src/eval.py", [f"ckpt_path={run_dir}", "tasks=[lambada]", "task_data.lambada=./missing.jsonl",
                                      f"hydra.run.dir={tmp_path / 'e'}"])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "task 'lambada': could not read the local file or dir './missing.jsonl'" in done.stderr


def test_eval_tasks_only_and_bad_names(run_dir: Path, tmp_path: Path) -> None:
    base = [f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}", "trainer.accelerator=cpu",
            f"paths.output_dir={tmp_path}"]
    metrics = evaluate(compose_config([*base, "tasks=[lambada]", "val_loss=false", f"task_data.lambada={LAMBADA}"],
                                      config_name="eval"))
    assert "val/loss" not in metrics and metrics["lambada/n"] == 8
    assert json.loads((tmp_path / "eval.json").read_text()) == metrics
    with pytest.raises(ConfigError, match="the known tasks are: lambada, hellaswag"):
        evaluate(compose_config([*base, "tasks=[lambda]"], config_name="eval"))
    with pytest.raises(ConfigError, match="leave nothing to evaluate"):
        evaluate(compose_config([*base, "val_loss=false"], config_name="eval"))


def test_callback_is_off_without_tasks_and_checks_its_settings() -> None:
    off = ZeroShotEval()  # the default config: tasks=[]
    trainer = SimpleNamespace(global_step=500)  # nothing else: an off callback must touch nothing
    off.on_fit_start(trainer, None)
    off.on_train_batch_end(trainer, None, None, None, 0)
    assert off._examples == {}
    with pytest.raises(ConfigError, match=r"callbacks.zero_shot.tasks=\['lambda'\] has unknown task"):
        ZeroShotEval(tasks=["lambda"])
    # Ranges are the schema's (gptlab.config.callbacks.ZeroShotEval), checked before the run is built.
    node = {"_target_": "gptlab.train.callbacks.ZeroShotEval", "tasks": ["lambada"]}
    with pytest.raises(ConfigError, match="callbacks.zero_shot.limit=0 is invalid: use an integer >= 1"):
        check_node("callbacks.zero_shot.", OmegaConf.create({**node, "limit": 0}))
    with pytest.raises(ConfigError, match="callbacks.zero_shot.every_n_steps=0 is invalid: use an integer >= 1"):
        check_node("callbacks.zero_shot.", OmegaConf.create({**node, "every_n_steps": 0}))
    with pytest.raises(ConfigError, match=r"callbacks.zero_shot.data=\['lambada', 'piqa'\] has unknown task"):
        ZeroShotEval(tasks=["lambada"], data={"lambada": "x.jsonl", "piqa": "y.jsonl"})


def test_eval_settings_that_would_do_nothing_are_refused(tmp_path: Path) -> None:
    """eval.py task_limit=5 with no tasks used to run the val loss alone without a word; the rule is the one
    callbacks.zero_shot.limit follows in training (gptlab.preflight.option_relevance.tasks_only)."""
    cfg = compose_config(["ckpt_path=/nonexistent.ckpt", "task_limit=5", "trainer.accelerator=cpu",
                          f"paths.output_dir={tmp_path}"], config_name="eval")
    with pytest.raises(ConfigError, match=r"task_limit=5 has no effect: it matters only when tasks is not empty"):
        evaluate(cfg)
    cfg = compose_config(["ckpt_path=/nonexistent.ckpt", "trainer.limit_val_batches=0", "trainer.accelerator=cpu",
                          f"paths.output_dir={tmp_path}"], config_name="eval")
    with pytest.raises(ConfigError, match=r"trainer.limit_val_batches=0 scores no validation batch, so val_loss=true "
                                          r"would compute nothing"):  # was an IndexError after loading the model
        evaluate(cfg)


def test_callback_refuses_rows_longer_than_the_context_before_the_first_step(tmp_path: Path) -> None:
    """A task row whose continuation does not fit the model's context is refused at fit start, naming the task,
    the row and the keys to change, not at the first zero-shot step hours later (where scoring refuses it too)."""
    rows = tmp_path / "lambada.jsonl"
    rows.write_text(json.dumps({"text": "The word is " + "x" * 40}) + "\n")
    callback = ZeroShotEval(tasks=["lambada"], data={"lambada": str(rows)})
    module = SimpleNamespace(model=GPT(GPTConfig(n_layer=1, n_head=2, n_embd=32, block_size=32, vocab_size=257)))
    trainer = SimpleNamespace(strategy=None, datamodule=SimpleNamespace(tokenizer=ByteTokenizer()))
    with pytest.raises(ConfigError, match=r"lambada example 1 \(callbacks.zero_shot.data.lambada\) has a continuation "
                                          r"of 41 tokens.*or train a longer context \(model.block_size=64\)"):
        callback.on_fit_start(trainer, module)
    rows.write_text(json.dumps({"text": "The word is " + "x" * 20}) + "\n")
    callback.on_fit_start(trainer, module)  # fits: nothing refused
    assert len(callback._examples["lambada"]) == 1


def test_task_data_null_is_the_tasks_hub_dataset(monkeypatch) -> None:
    """`task_data.lambada=null` reads the default Hub dataset, not one named 'None'."""
    from gptlab.eval import zeroshot

    monkeypatch.setattr(zeroshot, "task_examples", lambda task, source, limit, field: source)
    assert load_examples(["lambada", "hellaswag"], {"lambada": None}) == {
        "lambada": "EleutherAI/lambada_openai", "hellaswag": "Rowan/hellaswag"}
