"""scripts/gpu_check.py: every open GPU figure in one command, run by whichever session is lent a GPU."""
