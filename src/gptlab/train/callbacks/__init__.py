"""Lightning callbacks that gptlab's configs name (conf/callbacks/)."""

from gptlab.train.callbacks.checkpoint import ModelCheckpoint
from gptlab.train.callbacks.hparams import HParamsSummary
from gptlab.train.callbacks.loss_spike import LossSpikeGuard
from gptlab.train.callbacks.mixture import MixtureTokens
from gptlab.train.callbacks.rank_consistency import RankConsistencyCheck
from gptlab.train.callbacks.samples import TextSamples
from gptlab.train.callbacks.stability import StabilityProbes
from gptlab.train.callbacks.throughput import TokenThroughput
from gptlab.train.callbacks.zeroshot import ZeroShotEval

__all__ = [
    "HParamsSummary", "LossSpikeGuard", "MixtureTokens", "ModelCheckpoint", "RankConsistencyCheck", "StabilityProbes",
    "TextSamples", "TokenThroughput", "ZeroShotEval",
]
