"""Check at the end of fit that every data-parallel rank holds the same weights.

DDP keeps replicas identical only if every rank applies the same update; a rank-dependent code path
(an unsynchronised RNG, a skipped step) makes them drift silently. A hash per rank, compared once at
the end, costs one all-gather.
"""

from __future__ import annotations

import hashlib
import logging

import lightning as L
import torch

from gptlab.execution.fsdp_strategy import shards_weights

log = logging.getLogger(__name__)


def weights_digest(module: torch.nn.Module) -> int:
    h = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        h.update(name.encode())
        h.update(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes())
    return int.from_bytes(h.digest()[:7], "big")  # fits an int64 tensor for the all-gather


class RankConsistencyCheck(L.Callback):
    def on_fit_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.world_size < 2 or shards_weights(trainer.strategy):
            return  # under FSDP each rank holds its own shard: nothing is replicated to compare
        mine = torch.tensor([weights_digest(pl_module)], dtype=torch.int64, device=pl_module.device)
        digests = trainer.strategy.all_gather(mine).flatten().tolist()
        if len(set(digests)) != 1:
            raise RuntimeError(f"model weights differ across ranks after fit (digests per rank: {digests}).")
        if trainer.is_global_zero:
            log.info("Model weights identical on all %d ranks (digest %x).", trainer.world_size, digests[0])
