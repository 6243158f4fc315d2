"""hydra/launcher=fused where Hydra's plugin discovery finds it; the launcher is gptlab.launch.fused_launcher."""

from gptlab.launch.fused_launcher import FusedLauncher as _FusedLauncher


class FusedLauncher(_FusedLauncher):
    """gptlab.launch.fused_launcher.FusedLauncher, where Hydra's plugin discovery finds it."""
