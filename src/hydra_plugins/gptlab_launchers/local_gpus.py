"""Hydra takes launchers only from the `hydra_plugins` namespace: this names gptlab's local GPU launcher there
(conf/hydra/launcher/local_gpus.yaml). The launcher itself is gptlab.launch.gpu_launcher."""

from gptlab.launch.gpu_launcher import LocalGPULauncher as _LocalGPULauncher


class LocalGPULauncher(_LocalGPULauncher):
    """gptlab.launch.gpu_launcher.LocalGPULauncher, where Hydra's plugin discovery finds it."""
