"""Hugging Face checkpoints in and out: GPT-2, GPT-1, GPT-Neo and Llama directories (`from_pretrained`,
`save_pretrained`) and the tokenizer files an exported directory needs. Built on gptlab.model, which knows nothing
of them."""

from gptlab.interop.hf import from_pretrained, save_pretrained

__all__ = ["from_pretrained", "save_pretrained"]
