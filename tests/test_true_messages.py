"""Messages that say what is true (issue 54, section 4): each refusal or note names what is really the matter, and
its way out works when typed."""

from __future__ import annotations

import pytest
from helpers import compose_config, run_script

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
    assert message is not None and message.startswith("seed is already a key of the config"), message
    assert "without the +" in message
