"""The members' shapes scripts/bench_fused.py and gpu_check's fused_sweep part measure
(gptlab.tools.benchmarks.fused_speed), apart from the benchmark: bench_fused.py's --model choices are read without
importing torch."""

NANO = dict(n_layer=4, n_head=4, n_embd=128, block_size=256, vocab_size=257)  # conf/model/nano.yaml, bytes tokens
GPT2_SMALL = dict(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=50257, pad_vocab_to=64)
SHAPES = {"nano": NANO, "gpt2_small": GPT2_SMALL}
