"""The tokenizer half of a Hugging Face export: tokenizer files transformers loads, and the right special ids.

`GPT.save_pretrained` writes the weights and config.json; without tokenizer files `AutoTokenizer` cannot load
the directory, and GPT-2's default bos/eos id 50256 is out of range for a byte-tokenizer run (257 ids). The
files are built with transformers' own converter (TikTokenConverter) for tiktoken encodings, and with the
`tokenizers` library for gptlab's byte tokenizer (256 byte tokens + <|endoftext|> = 256, same ids as gptlab).
"""

from __future__ import annotations

import base64
import json
import tempfile
from pathlib import Path
from typing import Any, Optional

from gptlab.atomic import atomic_write_text
from gptlab.data.tokenizers import EOT, ByteTokenizer

CONFIG_FILE = "config.json"


def byte_tokenizer_object() -> Any:
    """A `tokenizers.Tokenizer` whose ids are gptlab's: byte b -> id b, <|endoftext|> -> 256."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    alphabet = bytes_to_unicode()  # the byte-level BPE's printable stand-in for each byte
    vocab = {alphabet[b]: b for b in range(256)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))  # no merges: every byte is its own token
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOT])
    return tok


def tiktoken_tokenizer_object(tokenizer: Any) -> Any:
    from transformers.convert_slow_tokenizer import TikTokenConverter

    enc = tokenizer._enc  # tiktoken keeps the ranks, pattern and special tokens there
    with tempfile.TemporaryDirectory() as tmp:
        ranks = Path(tmp) / f"{tokenizer.name}.tiktoken"
        ranks.write_text("".join(f"{base64.b64encode(token).decode()} {rank}\n"
                                 for token, rank in enc._mergeable_ranks.items()))
        return TikTokenConverter(vocab_file=str(ranks), pattern=enc._pat_str,
                                 extra_special_tokens=enc._special_tokens).converted()


GPTLAB_TOKENIZER_KEY = "gptlab_tokenizer"  # in config.json: gptlab's own tokenizer config, for src/sample.py


def export_tokenizer(tokenizer: Any, out: Path, tokenizer_cfg: Optional[dict] = None) -> None:
    """Write tokenizer.json and tokenizer_config.json into `out`, and set bos/eos/pad in config.json to the
    tokenizer's end-of-text id; `tokenizer_cfg` (gptlab's config of it) is recorded there for sample.py."""
    from transformers import PreTrainedTokenizerFast

    obj = byte_tokenizer_object() if isinstance(tokenizer, ByteTokenizer) else tiktoken_tokenizer_object(tokenizer)
    fast = PreTrainedTokenizerFast(tokenizer_object=obj, bos_token=EOT, eos_token=EOT, unk_token=None,
                                   model_max_length=_block_size(out))
    fast.save_pretrained(str(out))
    config_path = out / CONFIG_FILE
    config = json.loads(config_path.read_text())
    config.update(bos_token_id=tokenizer.eot_id, eos_token_id=tokenizer.eot_id)
    if tokenizer_cfg is not None:
        config[GPTLAB_TOKENIZER_KEY] = tokenizer_cfg
    atomic_write_text(config_path, json.dumps(config, indent=2) + "\n")


def read_exported_tokenizer(directory: Path) -> Optional[dict]:
    """The gptlab tokenizer config export_tokenizer recorded in a directory's config.json (None: none recorded)."""
    try:
        return json.loads((directory / CONFIG_FILE).read_text()).get(GPTLAB_TOKENIZER_KEY)
    except (OSError, ValueError):
        return None


def _block_size(out: Path) -> int:
    config = json.loads((out / CONFIG_FILE).read_text())
    return int(config.get("n_positions", 1024))
