"""gptlab: GPT-1/2/3 pre-training and ablations with PyTorch Lightning and Hydra."""

__version__ = "0.1.0"
