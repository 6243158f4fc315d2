"""What runs on a trained checkpoint: validation loss and perplexity, zero-shot tasks (LAMBADA, HellaSwag, and
lm-eval's through an adapter), and sampling."""
