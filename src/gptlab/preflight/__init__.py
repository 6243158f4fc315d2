"""What is checked once, before anything is built: the config's effect on this machine (devices, memory, disk for
checkpoints, options that would be ignored), so a run that cannot work fails in seconds with one message."""
