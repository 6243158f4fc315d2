"""HParams summaries with each value's own type, built from TensorBoard's protos.

torch's `torch.utils.tensorboard.summary.hparams` tests `isinstance(v, (int, float))` before `bool`, so every
boolean is written as the number 1.0 or 0.0 (HParams then shows `check_memory 1.0000`), and declares every
number a float. Here booleans are bool values of type DATA_TYPE_BOOL, strings strings, and numbers numbers.

Integers stay numbers and show as `32.000`: TensorBoard has no integer to declare (api.proto's DataType is UNSET,
STRING, BOOL or FLOAT64; protobuf's Value holds a double) and its HParams frontend prints every number with
`value.toPrecision(5)` (tf-hparams-utils.ts `prettyPrint`). As strings they would print `32`, but lose HParams'
min/max filter (offered for FLOAT64 only), sort `128` before `32`, and sit on a categorical axis in its plots.

A sweep job declares only the keys its sweep varies, marked as differing: the HParams table (tf-hparams-query-pane)
shows the first five declared columns, so declaring every constant put check_memory, data._target_, ... on screen
and the swept keys off it. The constants stay in each run's config_resolved.yaml.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from tensorboard.compat.proto import summary_pb2
from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
from tensorboard.plugins.hparams import summary_v2 as hp


def _data_type(value: Any) -> int:
    if isinstance(value, bool):
        return api_pb2.DATA_TYPE_BOOL
    if isinstance(value, (int, float)):
        return api_pb2.DATA_TYPE_FLOAT64
    return api_pb2.DATA_TYPE_STRING


def hparams_summaries(params: Mapping[str, Any], metrics: Iterable[str],
                      swept: Iterable[str] = ()) -> list[summary_pb2.Summary]:
    """The experiment (each hparam's name and type, the metric tags) and this run's session values. `swept`: the
    keys a sweep varies (of `params`), then the only columns declared, in that order."""
    swept = list(swept)
    declared = [(k, params[k]) for k in swept] if swept else params.items()
    experiment = api_pb2.Experiment(
        hparam_infos=[api_pb2.HParamInfo(name=k, type=_data_type(v), differs=bool(swept)) for k, v in declared],
        metric_infos=[api_pb2.MetricInfo(name=api_pb2.MetricName(tag=m)) for m in metrics],
    )
    summary = summary_pb2.Summary()
    summary.value.add(tag=metadata.EXPERIMENT_TAG, tensor=metadata.NULL_TENSOR,
                      metadata=metadata.create_summary_metadata(plugin_data_pb2.HParamsPluginData(experiment=experiment)))
    return [summary, hp.hparams_pb(dict(params))]
