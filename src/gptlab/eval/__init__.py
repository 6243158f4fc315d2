"""What runs on a trained model: zero-shot tasks (LAMBADA, HellaSwag, and lm-eval's through an adapter), their
scoring, and sampling."""
