"""The fused step in process (execution/fused.py): each member's loss and gradients are bitwise those of its own
step alone, with its own dropout rate and masks, z-loss and label smoothing; no Lightning, no subprocess."""

from __future__ import annotations

import threading
import time

import torch
from helpers import HANG_GUARD_S

from gptlab.checkpoint.rng import rng_states, set_rng_states
from gptlab.execution.fused import FusedGroup, _Request, fused_step
from gptlab.model import GPT, GPTConfig
from gptlab.model.loss import model_loss
from gptlab.tools.benchmarks.fused_batched import batched_step, supports
from gptlab.tools.benchmarks.fused_speed import measure, physics, table

SHAPE = dict(n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=64)
# What may differ between the members of one group and reaches the fused forward: dropout rate (and masks),
# z-loss, label smoothing; init scale shows the weights are each member's own.
MEMBERS = [dict(dropout=0.0, z_loss=0.0, smoothing=0.0, init_scale=None),
           dict(dropout=0.1, z_loss=1e-4, smoothing=0.1, init_scale=0.5),
           dict(dropout=0.3, z_loss=0.0, smoothing=0.0, init_scale=1.0)]


def _members(members: list[dict], shape: dict = SHAPE) -> list[tuple[GPT, torch.Tensor, torch.Tensor, dict]]:
    out = []
    for seed, m in enumerate(members):
        torch.manual_seed(seed)
        model = GPT(GPTConfig(**shape, dropout=m["dropout"], init_scale=m["init_scale"])).train()
        x, y = torch.randint(0, 64, (2, 2, shape["block_size"])).unbind(0)
        out.append((model, x, y, m))
    return out


def _streams(seed: int) -> dict:
    torch.manual_seed(1000 + seed)
    return rng_states()


def _check(members: list) -> None:
    requests = [_Request(model, x, y, None, m["smoothing"], m["z_loss"], rng=_streams(i))
                for i, (model, x, y, m) in enumerate(members)]
    fused = fused_step(requests)
    for i, ((model, x, y, m), (parts, grads)) in enumerate(zip(members, fused)):
        set_rng_states(_streams(i))
        model.zero_grad(set_to_none=True)
        alone = model_loss(model, x, y, label_smoothing=m["smoothing"], z_loss=m["z_loss"])
        alone.objective.backward()
        assert torch.equal(parts.objective, alone.objective.detach()), i
        for (name, p), g in zip(model.named_parameters(), grads):
            assert torch.equal(g, p.grad), (i, name)
        # the member's streams advanced by exactly its own draws: its next step draws what its run alone draws
        assert torch.equal(requests[i].rng["torch"], torch.get_rng_state()), i


def test_each_member_steps_as_alone_with_its_own_dropout_z_loss_and_smoothing() -> None:
    """The forward runs member 0's modules: its rate (0, then 0.3 reversed) must not become the others'."""
    _check(_members(MEMBERS))
    _check(_members(MEMBERS[::-1]))


def test_local_attention_in_query_blocks_and_rope_step_as_alone() -> None:
    """Banded attention computed in blocks of queries (a mask per block: one batch row of SDPA's each, which the
    members' one kernel call repeats per member) and rotary positions."""
    shape = {**SHAPE, "n_layer": 1, "block_size": 32, "attn_pattern": ["local"], "attn_window": 8,
             "attn_impl": "chunked", "pos_emb": "rope"}
    _check(_members(MEMBERS[:1] * 2, shape))


def test_dropout_masks_differ_between_members_and_repeat_their_own_streams() -> None:
    """Two members with the same weights, batch and rate but other streams get other losses; the same streams, the
    same loss."""
    torch.manual_seed(0)
    model = GPT(GPTConfig(**SHAPE, dropout=0.3)).train()
    x, y = torch.randint(0, 64, (2, 2, 16)).unbind(0)
    twin = GPT(GPTConfig(**SHAPE, dropout=0.3)).train()
    twin.load_state_dict(model.state_dict())
    losses = [p.objective for p, _ in fused_step([_Request(model, x, y, None, 0.0, 0.0, rng=_streams(1)),
                                                  _Request(twin, x, y, None, 0.0, 0.0, rng=_streams(2))])]
    same = [p.objective for p, _ in fused_step([_Request(model, x, y, None, 0.0, 0.0, rng=_streams(1)),
                                                _Request(twin, x, y, None, 0.0, 0.0, rng=_streams(1))])]
    assert not torch.equal(losses[0], losses[1]) and torch.equal(same[0], same[1])



def test_the_batched_modules_prototype_gives_each_member_its_gradients() -> None:
    """scripts/bench_fused.py's other implementation computes what the model computes (to rounding: its matmuls
    are batched), so the bench compares two ways of the same step."""
    models = [GPT(GPTConfig(**SHAPE)) for _ in range(2)]
    assert supports(models[0])
    batches = [tuple(torch.randint(0, 64, (2, 2, 16)).unbind(0)) for _ in models]
    for model, (x, y), grads in zip(models, batches, batched_step(models, batches)):
        model_loss(model, x, y).objective.backward()
        for p, g in zip(model.parameters(), grads):
            torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-6)


def test_the_bench_prints_every_side_and_the_physics() -> None:
    rows = measure([1, 2], batch=1, repeats=1, device=torch.device("cpu"), shape=SHAPE)
    lines = table(rows)
    assert len(lines) == 4 and all(line.count("|") == 11 for line in lines)
    assert all(r.alone_s > 0 and r.fused_s > 0 and r.batched_s > 0 for r in rows)
    said = physics(1, 1, torch.device("cpu"), shape=SHAPE)[0]
    assert "GFLOP/s" in said and "is dispatch cost" in said and "members are at most" in said
    rope = measure([1], batch=1, repeats=1, device=torch.device("cpu"), shape={**SHAPE, "pos_emb": "rope"},
                   bf16=True)  # GPT-2 small's padded vocab is also not written out: its GPU rows print "-"
    assert rope[0].batched_s is None and "| - | - |" in table(rope)[2] and table(rope)[2].count("|") == 11


def test_members_keep_their_streams_across_turns_and_one_that_leaves_at_once_holds_up_none() -> None:
    """A relaunch's finished or failed member ends before its first step (train() skips it): the others' rounds go
    on without it. Each member's random draws after a fused step continue its own stream, whoever ran between."""
    group, draws = FusedGroup(3), {}
    models = [GPT(GPTConfig(**SHAPE)) for _ in range(3)]
    x, y = torch.randint(0, 64, (2, 2, 16)).unbind(0)

    def member(i: int) -> None:
        with group.member(i):
            if i == 1:
                return  # skipped: finished in an earlier launch
            torch.manual_seed(100 + i)
            draws[i] = [torch.rand(1)]
            for _ in range(2):
                group.submit(i, _Request(models[i], x, y, None, 0.0, 0.0))
                draws[i].append(torch.rand(1))

    threads = [threading.Thread(target=member, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=HANG_GUARD_S)
    assert not any(thread.is_alive() for thread in threads)
    for i in (0, 2):
        torch.manual_seed(100 + i)
        assert torch.equal(torch.cat(draws[i]), torch.rand(3)), i
    assert 1 not in draws


def _run_group(jobs: list) -> tuple[FusedGroup, list, float]:
    """Each (model, idx, targets, mtp) submitted once by a member thread of one group; (group, results, wall s)."""
    group, results = FusedGroup(len(jobs)), [None] * len(jobs)

    def member(i: int) -> None:
        model, x, y, mtp = jobs[i]
        with group.member(i):
            results[i] = group.submit(i, _Request(model, x, y, None, 0.0, 0.0, mtp))

    started = time.perf_counter()
    threads = [threading.Thread(target=member, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=HANG_GUARD_S)
    assert not any(thread.is_alive() for thread in threads)
    return group, results, time.perf_counter() - started


def test_members_whose_steps_differ_in_code_or_shape_never_share_a_round() -> None:
    """What the grouping keeps apart is checked once more at each round (issue 54): a member at another stage's
    window, one cut into shorter sequences, one whose head was untied, one with multi-token weights: each gets
    exactly its own step alone, with member 0 at the plain settings (the forward runs member 0's modules)."""
    local = {**SHAPE, "n_layer": 1, "attn_pattern": ["local"], "attn_window": 8}
    torch.manual_seed(0)
    models = [GPT(GPTConfig(**local)).train() for _ in range(3)] + [GPT(GPTConfig(**local, untie_at=0.5)).train()]
    models[1].use_window(4)  # a stage of stages.windows
    models[3].untie_head()  # past model.untie_at's step
    x, y = torch.randint(0, 64, (2, 2, 16)).unbind(0)
    jobs = [(models[0], x, y, None), (models[1], x, y, None), (models[2], x.reshape(4, 8), y.reshape(4, 8), None),
            (models[3], x, y, torch.tensor([0.5, 0.25]))]
    _, results, _ = _run_group(jobs)
    for i, ((model, xi, yi, mtp), (parts, grads)) in enumerate(zip(jobs, results)):
        model.zero_grad(set_to_none=True)
        alone = model_loss(model, xi, yi, mtp=mtp)
        alone.objective.backward()
        assert torch.equal(parts.objective, alone.objective.detach()), i
        for (name, p), g in zip(model.named_parameters(), grads):
            assert torch.equal(g, p.grad), (i, name)


def test_a_members_seconds_are_its_share_of_the_groups_time_not_the_wall_clock() -> None:
    """What a member's fit_seconds and tokens/s are measured on (execution/fused.py clock): its own turns and its
    share of each round, so the members' seconds add up to at most the group's time (each member's wall clock
    would add up to k times it)."""
    torch.manual_seed(0)
    x, y = torch.randint(0, 64, (2, 2, 16)).unbind(0)
    group, _, wall = _run_group([(GPT(GPTConfig(**SHAPE)).train(), x, y, None) for _ in range(3)])
    seconds = [group.seconds(i) for i in range(3)]
    assert all(s > 0 for s in seconds) and sum(seconds) <= wall, (seconds, wall)
