"""DDP ranks > 0 of the tests' runs, forked instead of started as fresh interpreters.

Lightning starts a DDP rank > 0 as `python <script> args` (train's from gptlab.launch.hydra_ddp); each one was ~10 s
of imports, and the suite's DDP tests (the preemption drill, sweeps, FSDP on gloo) start dozens. In a run forked from
the test zygote (tests/forkserver.py) that command starts tests/rank_shim.py instead: a standard-library client
(milliseconds) that connects to this module's server, an idle copy of the zygote forked before it served anything,
and hands over the rank's argv, cwd, environment, process group, signal mask and stdio fds. The server forks a
monitor per rank, and the monitor forks the rank, which runs the script as the zygote's children do.

What the launcher sees is the shim, and the shim stands in for the rank:
- a signal sent to the shim (the drills find ranks as the launcher's children) is passed on to the rank;
- the rank's exit code, or the signal that killed it, is the shim's;
- the shim killed outright (SIGKILL: a lost rank, or the launcher stopping its ranks) closes its connection, and the
  monitor SIGKILLs the rank at once;
- the rank is in the launcher's process group (a test's kill of the run's group reaches it) and starts with the
  signals the launcher held blocked while it started it (gptlab.signals' hold) still blocked.
"""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import socket
import sys
import tempfile
from pathlib import Path
from typing import Callable

SHIM = Path(__file__).with_name("rank_shim.py")
MESSAGE_BYTES = 1 << 20  # one request: argv, cwd, the environment


def start(run_child: Callable[[dict, list[int]], None]) -> str:
    """In the zygote, after its imports: fork the rank server, and route the DDP rank command of every run the
    zygote forks through the shim. Returns the server socket's temp dir, for the zygote to remove when it ends."""
    folder = tempfile.mkdtemp(prefix="gptlab-ranks-")
    path = os.path.join(folder, "socket")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(16)
    if os.fork() == 0:
        _serve(listener, run_child)
    listener.close()
    _route_ranks(path)
    return folder


def _serve(listener: socket.socket, run_child: Callable[[dict, list[int]], None]) -> None:
    """The rank server: ends with the zygote (PR_SET_PDEATHSIG); each connection is one rank, run by a monitor."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)  # not the zygote's request pipe or its replies
    os.dup2(null, 1)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # monitors are reaped by the kernel
    while True:
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            _monitor(conn, run_child)
        conn.close()


def _monitor(conn: socket.socket, run_child: Callable[[dict, list[int]], None]) -> None:
    """One rank: fork it, tell the shim its pid, then report how it ended, or SIGKILL it if the shim is gone."""
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    message, fds, _, _ = socket.recv_fds(conn, MESSAGE_BYTES, 3)
    request = json.loads(message)
    pid = os.fork()
    if pid == 0:
        conn.close()
        run_child(request, fds)
    for fd in fds:
        os.close(fd)
    conn.send(json.dumps({"pid": pid}).encode())
    ended = os.pidfd_open(pid)
    while True:
        ready, _, _ = select.select([conn, ended], [], [])
        if ended in ready:
            _, status = os.waitpid(pid, 0)
            try:
                conn.send(json.dumps({"status": status}).encode())
            except OSError:
                pass
            os._exit(0)
        if not conn.recv(16):  # the shim is gone: so is the rank, as a killed process takes nothing with it
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os._exit(0)


def _route_ranks(path: str) -> None:
    """Lightning's launchers start each rank with `subprocess.Popen([sys.executable, ...])` (whichever command
    function made the argv: gptlab's job command for train, Lightning's own for eval): their `subprocess` becomes
    one whose Popen starts the shim instead."""
    import subprocess
    import types

    import lightning.fabric.strategies.launchers.subprocess_script as fabric_launcher
    import lightning.pytorch.strategies.launchers.subprocess_script as trainer_launcher

    def popen(command, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if command and command[0] == sys.executable:
            command = [sys.executable, "-I", "-S", str(SHIM), path, *command[1:]]
        return subprocess.Popen(command, *args, **kwargs)

    via_shim = types.SimpleNamespace(**{name: getattr(subprocess, name) for name in dir(subprocess)
                                        if not name.startswith("__")})
    via_shim.Popen = popen
    for launcher in (trainer_launcher, fabric_launcher):
        launcher.subprocess = via_shim
