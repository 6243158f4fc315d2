"""What the entry scripts call: a training run (train.py), evaluation, data preparation and the sweep-job
bookkeeping around them. Each app gathers its checks, then builds from the lower layers."""
