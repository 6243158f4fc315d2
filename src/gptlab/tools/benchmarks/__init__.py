"""Measurements behind the speed and memory claims; scripts/bench_*.py print them."""
