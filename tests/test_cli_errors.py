"""Bad values stop the entry script at once with a message naming the field, and no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import compose_config, run_train

from gptlab.config.suggest import compose_message
from gptlab.errors import ConfigError
from gptlab.preflight.early_checks import check_before_run

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
# Run as a user runs them: one refused by a schema's range, one by the checks that build the model config.
IN_A_SUBPROCESS = {"model.norm", "model.vocab_size"}


def refusal(overrides: list[str], run_dir: Path) -> str:
    """The message the entry script's checks refuse `overrides` with, in-process: at compose or before the run."""
    try:
        cfg = compose_config(overrides, run_dir)
    except Exception as err:  # Hydra's compose error, as the entry script words it
        message = compose_message(err)
        assert message is not None, err
        return message
    with pytest.raises(ConfigError) as err:
        check_before_run(cfg)
    return str(err.value)


@pytest.mark.parametrize("overrides,field", CASES, ids=[c[1] + ":" + c[0][-1] for c in CASES])
def test_bad_value_is_refused_naming_the_field(overrides: list[str], field: str, tmp_path: Path) -> None:
    assert field in refusal(overrides, tmp_path / "run")


@pytest.mark.parametrize("overrides,field", [c for c in CASES if c[1] in IN_A_SUBPROCESS],
                         ids=sorted(IN_A_SUBPROCESS))
def test_bad_value_exits_with_a_message_naming_the_field(overrides: list[str], field: str, tmp_path: Path) -> None:
    proc = run_train([*overrides, f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert proc.returncode == 2
    assert field in proc.stderr and "gptlab: error:" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not (tmp_path / "run").exists()
