"""Lightning callbacks that gptlab's configs name (conf/callbacks/)."""

from gptlab.callbacks.hparams import HParamsSummary
from gptlab.callbacks.preemption import PreemptionCheckpoint
from gptlab.callbacks.rank_consistency import RankConsistencyCheck
from gptlab.callbacks.samples import TextSamples
from gptlab.callbacks.throughput import TokenThroughput

__all__ = ["HParamsSummary", "PreemptionCheckpoint", "RankConsistencyCheck", "TextSamples", "TokenThroughput"]
