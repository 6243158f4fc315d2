"""hydra/launcher=ray where Hydra's plugin discovery finds it; the launcher is gptlab.launch.ray_launcher (Ray itself
is imported only when a sweep starts)."""

from gptlab.launch.ray_launcher import RayLauncher as _RayLauncher


class RayLauncher(_RayLauncher):
    """gptlab.launch.ray_launcher.RayLauncher, where Hydra's plugin discovery finds it."""
