"""The sweeper conf/hydra/sweeper/basic.yaml names, where Hydra's plugin discovery finds it; it is
gptlab.launch.compose_once.BasicSweeper."""

from gptlab.launch.compose_once import BasicSweeper as _BasicSweeper


class BasicSweeper(_BasicSweeper):
    """gptlab.launch.compose_once.BasicSweeper, where Hydra's plugin discovery finds it."""
