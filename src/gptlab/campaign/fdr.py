"""The campaign-wide false discovery rate: LORD++ (Ramdas, Yang, Wainwright & Jordan 2017, "Online control of the
false discovery rate with decaying memory"; the GAI++ form of Javanmard & Montanari's LORD) from the online-fdr
package. Each new comparison against the baseline gets a level from the wealth left by the ones before it; a
discovery earns wealth back. The state is never stored: it is replayed from the ledger's p-values in the order they
were tested, so a killed writer cannot leave it half-updated."""

from __future__ import annotations

from dataclasses import dataclass

PROCEDURE = "LORD++ (Ramdas et al. 2017), online-fdr's LordPlusPlus, initial wealth q/2"


@dataclass(frozen=True)
class Granted:
    index: int  # 1-based position of this test in the campaign's sequence
    level: float  # the level this test was granted: reject when p <= level
    rejected: bool
    wealth: float  # what the campaign has left after this test


def _procedure(q: float):  # noqa: ANN202 - online-fdr's class, imported only when a campaign tests
    from online_fdr.p_values.investing.lord.plus_plus import LordPlusPlus

    return LordPlusPlus(alpha=q, wealth=q / 2)


def replay(p_values: list[float], q: float) -> list[Granted]:
    """The decisions of the whole sequence, in order: what each test was granted and what was left after it."""
    procedure = _procedure(q)
    out = []
    for i, p in enumerate(p_values, start=1):
        decision = procedure.test_one_detail(min(max(float(p), 0.0), 1.0))
        out.append(Granted(i, float(decision.test_level), bool(decision.rejected), float(procedure.wealth)))
    return out


def next_test(history: list[float], p: float, q: float) -> Granted:
    """The decision on a new p-value after `history` (the campaign's earlier p-values, in order)."""
    return replay([*history, p], q)[-1]


def wealth_left(history: list[float], q: float) -> float:
    return replay(history, q)[-1].wealth if history else q / 2
