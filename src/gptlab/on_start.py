"""Imported first by every entry script (`import gptlab.on_start`, before its other imports): from here on Ctrl-C
or SIGTERM ends the script with one gptlab line and exit 130 or 143, also while it still imports
(gptlab/entry_signals.py). A module of its own, so that the one import line does it, wherever the script's other
imports go; importing gptlab.entry_signals itself installs nothing."""

from gptlab.entry_signals import answer_signals

answer_signals()
