"""Stands in for a DDP rank > 0 that the test zygote's rank server forks (tests/rank_zygote.py says why and how).

`python -I -S rank_shim.py <server socket> <script or -m module> args`: standard library only, so it starts in
milliseconds. It passes on the signals it gets, and ends as the rank ended (its exit code, or killed by its signal).
"""

import json
import os
import signal
import socket
import sys

PASSED_ON = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP, signal.SIGQUIT)


def main() -> None:
    path, *argv = sys.argv[1:]
    what = {"module": argv[1], "args": argv[2:]} if argv[0] == "-m" else {"script": argv[0], "args": argv[1:]}
    held = signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the launcher's hold, inherited: the rank gets it too
    request = {**what, "cwd": os.getcwd(), "env": dict(os.environ), "pgid": os.getpgrp(),
               "sigmask": sorted(int(s) for s in held)}
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    server.connect(path)
    socket.send_fds(server, [json.dumps(request).encode()], [0, 1, 2])
    pid = json.loads(server.recv(1 << 16))["pid"]

    def pass_on(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    for signum in PASSED_ON:
        signal.signal(signum, pass_on)
    signal.pthread_sigmask(signal.SIG_SETMASK, [])  # signals held until now reach the rank, which holds them too
    reply = server.recv(1 << 16)
    code = os.waitstatus_to_exitcode(json.loads(reply)["status"]) if reply else 1
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
