"""Lightning callbacks that gptlab adds to Lightning's own."""

from gptlab.callbacks.rank_consistency import RankConsistencyCheck

__all__ = ["RankConsistencyCheck"]
