"""What runs on a trained checkpoint: validation loss and perplexity, and sampling."""
