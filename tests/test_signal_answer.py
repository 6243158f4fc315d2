"""A preemption signal is answered at once, also while the process is inside a kernel that no signal cuts (issue 46
item 6: a SIGTERM during a step of minutes went unanswered for 120 s+): one line says it stops at the end of the step
and saves there, and a second signal is answered too. The kernel here is a libc read() restarted after the signal
(SA_RESTART), which returns only when this test writes: the answers must come while it is still blocked."""

from __future__ import annotations

import signal
import subprocess
import sys

from helpers import CHECKOUT_ENV, HANG_GUARD_S

CHILD = """
import ctypes, signal, sys
from gptlab.signals import FLAG
FLAG.install()
signal.siginterrupt(signal.SIGTERM, False)  # the C read below restarts after the signal, as a kernel runs on
print("in the kernel", flush=True)
ctypes.CDLL(None).read(0, ctypes.create_string_buffer(1), 1)
print(f"kernel done; recorded {FLAG.signum}", flush=True)
"""


def test_a_signal_is_answered_while_a_kernel_runs_and_again_for_a_second() -> None:
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=CHECKOUT_ENV)
    try:
        assert proc.stdout.readline() == "in the kernel\n"
        proc.send_signal(signal.SIGTERM)
        first = proc.stderr.readline()
        assert first.startswith("SIGTERM received (gptlab): stopping at the end of the step in progress"), first
        assert "saving last.ckpt there" in first
        proc.send_signal(signal.SIGTERM)
        assert proc.stderr.readline().startswith("SIGTERM received again (gptlab): still stopping")
        assert proc.poll() is None  # still inside the kernel: both were answered from there
        proc.stdin.write("x")
        proc.stdin.close()
        assert proc.stdout.readline() == f"kernel done; recorded {int(signal.SIGTERM)}\n"
        assert proc.wait(HANG_GUARD_S) == 0
    finally:
        proc.kill()
