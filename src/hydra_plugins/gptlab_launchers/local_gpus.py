"""Hydra takes launchers only from the `hydra_plugins` namespace: this names gptlab's local GPU launcher there
(conf/hydra/launcher/local_gpus.yaml). The launcher itself is gptlab.runtime.gpu_launcher."""

from gptlab.runtime.gpu_launcher import LocalGPULauncher as _LocalGPULauncher


class LocalGPULauncher(_LocalGPULauncher):
    """gptlab.runtime.gpu_launcher.LocalGPULauncher, where Hydra's plugin discovery finds it."""
