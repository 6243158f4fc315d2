"""Many variants against one baseline are one family of tests: with k variants each tested at alpha, the chance
that some variant is called significant by seed noise alone grows toward 1 − (1 − alpha)^k. Holm's step-down
procedure (Holm 1979) holds that family-wise error at alpha for any dependence between the tests (the variants share
the baseline's seeds), and rejects everything Bonferroni does and often more.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given: the i-th smallest p times (k − i + 1), made non-decreasing in
    that order and capped at 1. A test is significant at family-wise level alpha when its adjusted p < alpha."""
    p = np.asarray(pvalues, dtype=float)
    k = len(p)
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, np.maximum.accumulate((k - np.arange(k)) * p[order]))
    adjusted = np.empty(k)
    adjusted[order] = stepped
    return adjusted.tolist()
