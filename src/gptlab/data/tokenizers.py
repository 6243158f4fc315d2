"""Tokenizers share one small interface so the corpora, shards and the model need not care which.

`bytes` needs no file: ids 0..255 are UTF-8 bytes and 256 is end-of-text. The BPE encodings come from
tiktoken, either downloaded by tiktoken itself or built from a local ranks file (air-gapped machines).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Optional, Protocol

import numpy as np

from gptlab.errors import ConfigError, invalid_choice

EOT = "<|endoftext|>"
# A fixed text whose ids fingerprint a tokenizer: two tokenizers with the same name but different ranks
# files encode it differently, so shards made with one are never read with the other.
_PROBE = "Hello, world! 12345 \t\n def f(x): return x ** 2  # café, naïve, 東京, 🙂 <|endoftext|>"


class Tokenizer(Protocol):
    name: str
    vocab_size: int  # number of ids, end-of-text included
    eot_id: int

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def token_byte_lengths(self) -> np.ndarray: ...


def fingerprint(tokenizer: Tokenizer) -> str:
    """A short hash of the tokenizer's behaviour, stored in shard manifests."""
    payload = json.dumps([tokenizer.name, tokenizer.vocab_size, tokenizer.eot_id, tokenizer.encode(_PROBE)])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


class ByteTokenizer:
    """UTF-8 bytes plus one end-of-text id: 257 ids, lossless on any text."""

    name = "bytes"
    vocab_size = 257
    eot_id = 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_array(self, text: str) -> np.ndarray:
        return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)

    def decode(self, ids: list[int]) -> str:
        # The end-of-text id is shown as a marker, not silently dropped. numpy, because a per-id Python loop
        # takes seconds on a corpus.
        arr = np.asarray(ids, dtype=np.int64)
        cuts = np.flatnonzero(arr == self.eot_id)
        pieces = np.split(arr, cuts)
        texts = [pieces[0].astype(np.uint8).tobytes().decode("utf-8", errors="replace")]
        texts += [p[1:].astype(np.uint8).tobytes().decode("utf-8", errors="replace") for p in pieces[1:]]
        return EOT.join(texts)

    def token_byte_lengths(self) -> np.ndarray:
        """UTF-8 bytes each id stands for: 1 for every byte, 0 for end-of-text (for bits per byte)."""
        lengths = np.ones(self.vocab_size, dtype=np.int64)
        lengths[self.eot_id] = 0
        return lengths


def _encoding_specs() -> dict[str, dict]:
    """Regex and special tokens of the encodings we support, for building them from a local ranks file.
    The values are tiktoken's (tiktoken_ext.openai_public), whose constructors would download the ranks."""
    from tiktoken_ext import openai_public as op

    r50k = {"pat_str": op.r50k_pat_str, "special_tokens": {EOT: 50256}, "explicit_n_vocab": 50257}
    cl100k_pat = (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
        r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
    )
    cl100k_special = {EOT: 100257, op.FIM_PREFIX: 100258, op.FIM_MIDDLE: 100259, op.FIM_SUFFIX: 100260,
                      op.ENDOFPROMPT: 100276}
    return {
        "gpt2": r50k,  # GPT-2's vocab.bpe/encoder.json hold the same ranks as r50k_base
        "r50k_base": r50k,
        "cl100k_base": {"pat_str": cl100k_pat, "special_tokens": cl100k_special},
    }


ENCODINGS = ("gpt2", "r50k_base", "cl100k_base")
# sha256 of each encoding's .tiktoken ranks file, as tiktoken checks its own downloads.
RANKS_SHA256 = {
    "gpt2": "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
    "r50k_base": "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930",
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
}


# Where `ranks_file: null` looks first, before letting tiktoken download: scripts/fetch_gpt2_ranks.py writes
# here, so a fetched file is used with no flag. Relative to the launch dir, like paths.log_dir; the environment
# variable GPTLAB_RANKS_DIR points elsewhere (e.g. a shared cache on a cluster).
DEFAULT_RANKS_DIR = "data/cache/tiktoken"


def default_ranks_file(encoding: str) -> Optional[Path]:
    """`<GPTLAB_RANKS_DIR or data/cache/tiktoken>/<encoding>.tiktoken` if it exists (gpt2 and r50k_base share
    one ranks file, so either name is accepted for both)."""
    directory = Path(os.environ.get("GPTLAB_RANKS_DIR", DEFAULT_RANKS_DIR))
    names = [encoding, *(n for n in ("gpt2", "r50k_base") if encoding in ("gpt2", "r50k_base") and n != encoding)]
    return next((directory / f"{n}.tiktoken" for n in names if (directory / f"{n}.tiktoken").is_file()), None)


def download_failure(err: Exception) -> str:
    """tiktoken's download error in one clause. A network failure names the host it could not reach: urllib3's
    chained message repeats it over ~500 characters of pool and resolver internals."""
    text = str(err)
    host = re.search(r"host='([^']+)'|resolve '([^']+)'", text)
    if isinstance(err, OSError):  # requests' ConnectionError and Timeout are OSErrors, as are the builtin ones
        where = next(g for g in host.groups() if g) if host else "the download server"
        return f"no network: {where} could not be reached"
    return f"{type(err).__name__}: {(text.strip().splitlines() or [''])[0][:200]}"


class TiktokenTokenizer:
    """A tiktoken BPE encoding. Documents are encoded as ordinary text: a literal "<|endoftext|>" inside a
    document is just characters, and only the corpus joins documents with the real end-of-text id."""

    def __init__(self, encoding: str = "gpt2", ranks_file: Optional[str] = None) -> None:
        import tiktoken

        if encoding not in ENCODINGS:
            raise invalid_choice("tokenizer.encoding", encoding, ENCODINGS)
        if ranks_file is None:
            ranks_file = default_ranks_file(encoding)
        if ranks_file is not None:
            self._enc = self._from_ranks_file(encoding, Path(ranks_file))
        else:
            try:
                self._enc = tiktoken.get_encoding(encoding)
            except Exception as err:  # tiktoken raises requests' errors, or ValueError on a bad hash
                looked = Path(os.environ.get("GPTLAB_RANKS_DIR", DEFAULT_RANKS_DIR)).absolute() / f"{encoding}.tiktoken"
                raise ConfigError(
                    f"tiktoken could not download the ranks of tokenizer.encoding={encoding!r} "
                    f"({download_failure(err)}) and found none in {looked}. For gpt2/r50k_base, "
                    "`python scripts/fetch_gpt2_ranks.py` fetches the file there from PyPI; otherwise set "
                    f"tokenizer.ranks_file=<path to {encoding}.tiktoken>."
                ) from err
        self.name = encoding
        self.vocab_size = self._enc.n_vocab
        self.eot_id = self._enc.eot_token

    @staticmethod
    def _from_ranks_file(encoding: str, path: Path):
        import tiktoken
        from tiktoken.load import load_tiktoken_bpe

        if not path.is_file():
            raise ConfigError(f"tokenizer.ranks_file={str(path)!r} does not exist; give the path of a .tiktoken file, "
                              "or leave tokenizer.ranks_file out to use the cached or downloaded ranks.")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != RANKS_SHA256[encoding]:
            other = [name for name, sha in RANKS_SHA256.items() if sha == digest]
            raise ConfigError(
                f"tokenizer.ranks_file={str(path)!r} has sha256 {digest}, not that of the {encoding} ranks "
                f"({RANKS_SHA256[encoding]}); "
                + (f"it holds the ranks of tokenizer.encoding={other[0]}, so use that encoding, or give " if other
                   else "give ")
                + f"the {encoding} ranks file, or leave tokenizer.ranks_file out to use the cached or downloaded ranks."
            )
        spec = _encoding_specs()[encoding]
        return tiktoken.Encoding(name=encoding, mergeable_ranks=load_tiktoken_bpe(str(path)), **spec)

    def encode(self, text: str) -> list[int]:
        return self._enc.encode_ordinary(text)

    def encode_array(self, text: str) -> np.ndarray:
        """Like `encode`, straight into a uint32 array: no Python list of ints on the prepare path."""
        return self._enc.encode_to_numpy(text, disallowed_special=())

    def decode(self, ids: list[int]) -> str:
        return self._enc.decode(ids)

    def token_byte_lengths(self) -> np.ndarray:
        """UTF-8 bytes each id stands for (for bits per byte): its bytes in the ranks; 0 for end-of-text and the
        other special tokens, which are markers and never text of a document, and for ids the encoding leaves
        unused (cl100k_base has gaps below its n_vocab)."""
        lengths = np.zeros(self.vocab_size, dtype=np.int64)
        for i in range(self.vocab_size):
            if self._enc.is_special_token(i):
                continue
            try:
                lengths[i] = len(self._enc.decode_single_token_bytes(i))
            except KeyError:  # an unused id
                continue
        return lengths
