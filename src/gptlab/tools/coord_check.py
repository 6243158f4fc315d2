"""muP's coordinate check (Yang et al. 2022, "Tensor Programs V", §5): the size of each layer's activations
after a few Adam steps, against width. Under a parametrization that is stable in width the per-coordinate size
(RMS) stays flat as n_embd grows; under the standard one, Adam's steps of fixed size add up along the fan-in and
the hidden outputs and logits grow. The slope of log RMS against log width, per layer, is the summary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from gptlab.atomic import atomic_write
from gptlab.data.sources import BuiltinSource
from gptlab.data.tokenizers import ByteTokenizer
from gptlab.model import GPTConfig
from gptlab.model.gpt import GPT
from gptlab.model.loss import next_token_loss
from gptlab.train.optim import adamw, param_groups, scale_group_lrs


@dataclass(frozen=True)
class CoordSetup:
    widths: Sequence[int] = (64, 128, 256, 512, 1024)
    base_width: int = 64
    n_layer: int = 2
    n_head: int = 4  # fixed: head_dim grows with width, as muP's width multiplier assumes
    block_size: int = 32
    batch_size: int = 8
    steps: int = 3
    lr: float = 3e-3
    seeds: Sequence[int] = (0, 1)


def corpus_batches(setup: CoordSetup, count: int) -> list[torch.Tensor]:
    """`count` fixed (batch, block_size + 1) windows of the built-in pydocs corpus, as bytes: the same for every
    width, so only the parametrization differs."""
    n = setup.batch_size * (setup.block_size + 1)
    text = ""
    for document in BuiltinSource("pydocs").documents():
        text += document
        if len(text) >= n * count:  # bytes >= characters
            break
    ids = torch.from_numpy(ByteTokenizer().encode_array(text).astype(np.int64))
    return [ids[i * n:(i + 1) * n].view(setup.batch_size, setup.block_size + 1) for i in range(count)]


def layer_modules(model: GPT) -> dict[str, nn.Module]:
    """The outputs the check measures: the embedding (after its dropout), each block's attention and MLP branch
    (before they join the residual stream), and the model itself (the logits)."""
    layers: dict[str, nn.Module] = {"embedding": model.drop}
    for i, block in enumerate(model.blocks):  # a branch model.no_attn_layers / no_mlp_layers removed is not measured
        layers.update({f"block{i}.{name}": branch for name, branch in (("attn", block.attn), ("mlp", block.mlp))
                       if branch is not None})
    layers["logits"] = model
    return layers


def activation_rms(model: GPT, idx: torch.Tensor) -> dict[str, float]:
    """RMS over every coordinate of each measured output, for one forward pass on idx."""
    found: dict[str, float] = {}
    hooks = [module.register_forward_hook(
        lambda _m, _i, out, name=name: found.__setitem__(name, out.detach().pow(2).mean().sqrt().item()))
        for name, module in layer_modules(model).items()]
    try:
        with torch.no_grad():
            model(idx)
    finally:
        for hook in hooks:
            hook.remove()
    return found


def trained_rms(setup: CoordSetup, parametrization: str, width: int, seed: int,
                batches: list[torch.Tensor]) -> dict[str, float]:
    """Build the model at `width`, take setup.steps Adam steps (gptlab's own param groups, so muP's per-layer
    lrs apply), and measure on the first batch."""
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=ByteTokenizer.vocab_size, block_size=setup.block_size, n_layer=setup.n_layer,
                    n_head=setup.n_head, n_embd=width, parametrization=parametrization,
                    mup_base_width=setup.base_width)
    model = GPT(cfg)
    optimizer = adamw(param_groups(adamw, model, 0.0), lr=setup.lr, weight_decay=0.0, fused=False)
    scale_group_lrs(optimizer)
    for batch in batches[:setup.steps]:
        loss = next_token_loss(model(batch[:, :-1]), batch[:, 1:])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return activation_rms(model, batches[0][:, :-1])


def coord_check(setup: CoordSetup, parametrization: str) -> dict[str, list[float]]:
    """layer -> RMS at each of setup.widths, the geometric mean over setup.seeds."""
    batches = corpus_batches(setup, max(1, setup.steps))
    table: dict[str, list[float]] = {}
    for width in setup.widths:
        runs = [trained_rms(setup, parametrization, width, seed, batches) for seed in setup.seeds]
        for layer in runs[0]:
            table.setdefault(layer, []).append(math.exp(sum(math.log(r[layer]) for r in runs) / len(runs)))
    return table


def slopes(widths: Sequence[int], table: dict[str, list[float]]) -> dict[str, float]:
    """Per layer, the least-squares slope of log RMS against log width (0 = flat; 1 = grows like the width)."""
    x = np.log(np.asarray(widths, dtype=float))
    return {layer: float(np.polyfit(x, np.log(values), 1)[0]) for layer, values in table.items()}


def plot(widths: Sequence[int], tables: dict[str, dict[str, list[float]]], title: str, path: Path) -> None:
    """One panel per parametrization: RMS against width, log-log, a line per layer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(tables), figsize=(5.5 * len(tables), 4.2), sharey=True, squeeze=False)
    for ax, (name, table) in zip(axes[0], tables.items()):
        for layer, values in table.items():
            ax.plot(widths, values, marker="o", label=layer)
        ax.set(xscale="log", yscale="log", xlabel="width (n_embd)", title=f"{name}: {title}")
        ax.set_xticks(list(widths), [str(w) for w in widths])
    axes[0][0].set_ylabel("activation RMS")
    axes[0][-1].legend(fontsize=8)
    fig.tight_layout()
    atomic_write(path, lambda tmp: fig.savefig(tmp, dpi=110, format="png"))
    plt.close(fig)
