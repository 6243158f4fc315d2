"""The token store of a weighted mixture: one memory or prepared store per source, mixed by MixedWindows.

Training draws windows by the mixture's weights (gptlab.data.mixture_windows); validation keeps one fixed set
of windows per source, one DataLoader each, so the module reports val/loss and val/bpb per source and overall.
The resume position is the global one every window store saves (epoch, windows); since the mixture is a pure
function of the global index, it fixes every source's position too. The checkpoint also records the weights and
the windows read from each source, and a resume with other weights is refused.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np
from torch.utils.data import DataLoader

from gptlab.data.mixture import FIELD, Mixture
from gptlab.data.mixture_windows import MixedWindows
from gptlab.data.position import TrainPosition
from gptlab.data.stores import DATA_IDENTITY, STORES, DataSettings, TokenStore, WindowStore, check_same_tokens
from gptlab.data.tokenizers import Tokenizer
from gptlab.data.windows import EpochWindows, RandomWindows, SequentialWindows
from gptlab.errors import ConfigError


class MixtureStore(TokenStore):
    name = "mixture"

    def __init__(self, source: Mixture, tokenizer: Tokenizer, settings: DataSettings, store: str) -> None:
        if store == "streaming":
            raise ConfigError(f"data.store=streaming cannot read a mixture ({FIELD}) yet; use data.store=memory, or "
                              "data.store=prepared to tokenize each source into <data.cache_dir>/<source name>/.")
        super().__init__(source, tokenizer, settings)
        source.check_tokenizer(tokenizer)
        self.mixture = source
        self.parts: dict[str, WindowStore] = {}
        for name, corpus in source.sources.items():
            part_settings = dataclasses.replace(settings, cache_dir=f"{settings.cache_dir}/{name}"
                                                if settings.cache_dir else None)
            self.parts[name] = STORES[store](corpus, tokenizer, part_settings)  # type: ignore[assignment]
        self.position = TrainPosition()
        self.train_set: Optional[MixedWindows] = None
        self.val_sets: dict[str, SequentialWindows] = {}
        self.train_windows: dict[str, int] = {}  # windows per pass, with sampling=epoch

    @property
    def val_sources(self) -> list[str]:
        return list(self.parts)

    def prepare(self) -> None:
        for part in self.parts.values():
            part.prepare()

    def setup(self, trainer: Any) -> None:
        if self.train_set is not None:
            return
        s, trains = self.settings, []
        for i, (name, part) in enumerate(self.parts.items()):
            tokens = part.tokens = part.load()  # kept on the part too: its identity() reads them
            seed = int(np.random.SeedSequence([s.seed, i]).generate_state(1)[0])  # each source its own draws
            if s.sampling == "random":
                trains.append(RandomWindows(tokens["train"], s.block_size, self._source_windows(len(tokens["train"])),
                                            seed))
            else:
                trains.append(EpochWindows(tokens["train"], s.block_size, seed))
                self.train_windows[name] = len(trains[-1])
            self.val_sets[name] = SequentialWindows(tokens["val"], s.block_size)
        per_epoch = s.samples_per_epoch or sum(len(t) for t in trains)
        self.train_set = MixedWindows(trains, list(self.mixture.weights.values()), per_epoch, s.seed)

    def _source_windows(self, train_tokens: int) -> int:
        """One pass over a source of `train_tokens` tokens: its whole non-overlapping windows (EpochWindows' count;
        with random sampling at least 1)."""
        windows = (train_tokens - 1) // self.settings.block_size
        return max(1, windows) if self.settings.sampling == "random" else windows

    def known_epoch_windows(self) -> Optional[int]:
        """The mixture's epoch before training, as setup makes it: data.samples_per_epoch (with either sampling), or
        one pass over every source (None where a source's count needs its shards prepared first)."""
        if self.settings.samples_per_epoch:
            return self.settings.samples_per_epoch
        tokens = [part.train_tokens_before_setup() for part in self.parts.values()]
        if any(t is None for t in tokens):
            return None
        return sum(self._source_windows(t) for t in tokens)  # type: ignore[arg-type]

    def train_dataloader(self, trainer: Any) -> DataLoader:
        workers = self.settings.num_workers
        return self.position.train_loader(self.train_set, trainer, self.settings.batch_size, trimmed_before=True,
                                          num_workers=workers, persistent_workers=workers > 0)

    def val_dataloader(self, trainer: Any) -> list[DataLoader]:  # type: ignore[override]
        return [self._loader(v, trainer) for v in self.val_sets.values()]

    def windows_seen(self, trainer: Any) -> dict[str, int]:
        """Training windows read from each source so far, by every rank together: global samples [e * N, e * N +
        used) of each epoch e reached (an epoch uses whole optimizer steps of its N), and the current epoch's done."""
        sampler = self.position.sampler
        if self.train_set is None or sampler is None or trainer is None:
            return {name: 0 for name in self.parts}
        n, seen = len(self.train_set), np.zeros(len(self.parts), dtype=np.int64)
        for epoch in range(sampler.epoch + 1):
            done = sampler.used if epoch < sampler.epoch else self.position.windows_done(trainer)
            seen += self.train_set.windows_before(epoch * n + done) - self.train_set.windows_before(epoch * n)
        return dict(zip(self.parts, (int(v) for v in seen)))

    def state_dict(self, trainer: Any) -> dict[str, Any]:
        state = self.position.state_dict(trainer)
        if state and self.train_set is not None:
            state[DATA_IDENTITY] = {name: part.identity() for name, part in self.parts.items()}
        return {**state, "mixture": {"weights": dict(self.mixture.weights), "windows": self.windows_seen(trainer)}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if "stream" in state:
            self._refuse(state, "streaming")
        saved = state.get("mixture")
        if state and saved is None:
            raise ConfigError(f"the checkpoint was trained on one corpus, not a mixture; resume with its data= "
                              f"config, or start a new run for the mixture ({FIELD}).")
        if saved is not None and saved["weights"] != self.mixture.weights:
            raise ConfigError(
                f"the checkpoint's mixture has weights {saved['weights']} but this run has {self.mixture.weights}; "
                f"resume with the same {FIELD} (sources and weights), or start a new run to change the mixture."
            )
        identity = state.get(DATA_IDENTITY)  # None: a checkpoint from before it was saved
        if identity is not None and self.train_set is not None:
            for name, part in self.parts.items():
                if name in identity:
                    check_same_tokens(identity[name], part.identity(), f"the mixture's source {name!r}")
        self.position.load_state_dict({k: v for k, v in state.items() if k not in ("mixture", DATA_IDENTITY)})
