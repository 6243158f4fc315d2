"""The decode benchmark runs end to end and its three contenders agree token for token (speed is its output,
not a test assertion)."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

import gptlab.config  # noqa: F401  (registers the schemas conf/ names)
from gptlab.tools.benchmarks.generate import report, run

ROOT = Path(__file__).resolve().parents[1]


def test_bench_generate_smoke() -> None:
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="bench_generate", overrides=[
            "model.n_layer=1", "model.n_embd=32", "model.n_head=2", "model.vocab_size=100", "model.block_size=64",
            "prompt_len=4", "new_tokens=12", "repeats=2",
        ])
    GlobalHydra.instance().clear()
    results = run(cfg)
    assert results["same_tokens"]
    assert set(results["tokens_per_s"]) == {"gptlab, KV cache", "gptlab, no cache", "transformers generate"}
    assert all(v > 0 for v in results["tokens_per_s"].values())
    text = report(cfg, results)
    assert "KV cache is" in text and "identical tokens across all three: yes" in text
