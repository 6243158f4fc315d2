"""Behind scripts/: benchmarks, the GPU doctor and the fault and preemption drills. Nothing imports tools."""
