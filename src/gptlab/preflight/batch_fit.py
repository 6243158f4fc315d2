"""The micro-batch a memory refusal suggests, chosen so that the command it makes passes every later check when typed.

A batch that only just fits is refused again on the next launch (free memory moves: the page cache, other
processes), so it fits with MEMORY_MARGIN to spare. It must also be one the run can use: under global_batch_tokens
it divides each rank's share of the step (gptlab.apps.build refuses any other), and an epoch of the corpus must hold
one optimizer step of it (gptlab.data.position refuses a step larger than the epoch). Where the corpus, not memory,
is what limits the batch, the words say so and name the data key that lifts the limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

MEMORY_MARGIN = 0.10  # a suggested setting leaves this share of the free memory unused


@dataclass(frozen=True)
class Batching:
    """What, besides memory, bounds the micro-batch of a run."""

    block_size: int
    ranks: int  # trainer.devices x trainer.num_nodes
    accumulate: int  # trainer.accumulate_grad_batches (ignored under global_batch_tokens, which derives it)
    global_batch_tokens: Optional[int]
    samples_per_epoch_lengthens: bool  # data.samples_per_epoch sets the epoch (random sampling, or a mixture)
    epoch_windows: Callable[[], Optional[int]]  # asked only when refusing (a memory store tokenizes its corpus)


def largest_fitting(fits: Callable[[int], bool], below: int) -> Optional[int]:
    """The largest micro-batch under `below` for which `fits` holds (None: not even 1); `fits` grows false with the
    batch, so a bisection (data.batch_size=1e8 costs ~27 estimates)."""
    if below <= 1 or not fits(1):
        return None
    low, high = 1, below - 1
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if fits(mid) else (low, mid - 1)
    return low


def _per_rank_step(batching: Batching) -> Optional[int]:
    """Windows each rank reads per optimizer step under global_batch_tokens (None: not set, or not a whole number of
    windows per rank, which gptlab.apps.build refuses in its own words)."""
    tokens = batching.global_batch_tokens
    if not tokens or tokens % (batching.block_size * batching.ranks):
        return None
    return tokens // (batching.block_size * batching.ranks)


@dataclass(frozen=True)
class Suggestion:
    batch: Optional[int]  # the micro-batch to suggest (None: none fits, or no step fits the epoch)
    words: list[str]  # the ways out that suggest it, or say why there is none
    also: str = ""  # overrides any other suggested batch needs beside it (a longer epoch)


def suggested_batch(fits: Callable[[int], bool], micro_batch: int, batching: Optional[Batching],
                    gb_of: Callable[[int], str]) -> Suggestion:
    """The micro-batch to suggest and its words: `fits(b)` is the memory test with the margin taken off; `gb_of(b)`
    words the memory that batch needs."""
    most = largest_fitting(fits, micro_batch)
    if most is None:
        return Suggestion(None, [])
    plain = f"({gb_of(most)}; global_batch_tokens keeps the step)"
    if batching is None:
        return Suggestion(most, [f"data.batch_size={most} {plain}"])
    per_rank = _per_rank_step(batching)
    if per_rank is not None:
        most = max(d for d in range(1, min(most, per_rank) + 1) if per_rank % d == 0)
    windows = batching.epoch_windows()
    if windows is None:
        return Suggestion(most, [f"data.batch_size={most} {plain}"])
    if per_rank is not None:  # the step is global_batch_tokens whatever the micro-batch
        step = per_rank * batching.ranks
        if windows >= step:
            return Suggestion(most, [f"data.batch_size={most} ({gb_of(most)})"])
        also = f"data.samples_per_epoch={step}" if batching.samples_per_epoch_lengthens else ""
        return Suggestion(most, [
            f"an epoch of {windows} training windows holds no optimizer step of global_batch_tokens="
            f"{batching.global_batch_tokens} ({step} windows) at any micro-batch: "
            + (f"`data.batch_size={most} {also}` ({gb_of(most)}) draws that many windows per epoch"
               if also else _bigger_corpus(batching, step))], also)
    step = batching.ranks * batching.accumulate  # windows per step for each window of the micro-batch
    cap = windows // step
    if cap == 0:
        return Suggestion(None, [f"an epoch of {windows} training windows holds no optimizer step even at "
                                 f"data.batch_size=1 ({step} windows: ranks x trainer.accumulate_grad_batches); "
                                 + _longer_epoch(batching, step, 1)])
    if cap >= most:
        return Suggestion(most, [f"data.batch_size={most} ({gb_of(most)})"])
    return Suggestion(cap, [f"data.batch_size={cap} (the largest whose optimizer step of {step * cap} windows an "
                            f"epoch of {windows} training windows holds; memory alone would allow {most}: "
                            + _longer_epoch(batching, step * most, most) + ")"])


def _bigger_corpus(batching: Batching, step_windows: int) -> str:
    return (f"a corpus of at least {step_windows * batching.block_size:,} training tokens (data.source) holds it, "
            "or data.sampling=random with data.samples_per_epoch")


def _longer_epoch(batching: Batching, step_windows: int, batch: int) -> str:
    """How to give an epoch room for a step of `step_windows` windows at micro-batch `batch`."""
    if batching.samples_per_epoch_lengthens:
        return f"`data.batch_size={batch} data.samples_per_epoch={step_windows}` draws that many windows per epoch"
    return _bigger_corpus(batching, step_windows)
