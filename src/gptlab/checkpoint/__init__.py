"""gptlab training checkpoints: the one reader (train, eval, sample and export load through it), the atomic
writer Lightning saves with, and the RNG state a checkpoint carries for exact resume."""
