"""Bad values stop the entry script at once with a message naming the field, and no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_train

CASES = [
    (["model.norm=sideways"], "model.norm"),
    (["model.pos_emb=rope3"], "model.pos_emb"),
    (["model.n_embd=100", "model.n_head=7"], "model.head_dim"),
    (["model.block_size=0"], "model.block_size"),
    (["model.dropout=1.5"], "model.dropout"),
    (["model.activation=swish"], "model.activation"),
    (["model.vocab_size=100"], "model.vocab_size"),
    (["data.store=disk"], "data.store"),
    (["data.source=pydocs"], "data.source"),  # a bare name, as conf/data/pydocs.yaml once had: now a node
]


@pytest.mark.parametrize("overrides,field", CASES, ids=[c[1] + ":" + c[0][-1] for c in CASES])
def test_bad_value_exits_with_a_message_naming_the_field(overrides: list[str], field: str, tmp_path: Path) -> None:
    proc = run_train([*overrides, f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert proc.returncode == 2
    assert field in proc.stderr and "gptlab: error:" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
