"""Tools behind scripts/: compute planning, sweep reports, benchmarks."""
