"""A zygote for the tests' entry-script runs: torch, Lightning, Hydra and gptlab imported once per pytest worker, then
each `python <script> args` that helpers.run_script asks for is a fork of it that runs the script as __main__.

Why: most of a test's subprocess was its ~10 s of imports (CPU time, not waiting), and the suite starts a few hundred
of them: on CI's 2 cores that was most of its wall time. A fork shares the imported modules and starts in
milliseconds. What the script sees is what `python <script>` gives it: its own pid and process group, argv, cwd,
environment, sys.path (the script's dir, then PYTHONPATH), stdio redirected to files, default signal handlers, exit
code or -signal from waitpid. What differs, and why that is safe here: modules imported by the zygote are not
imported again (the zygote runs with the same PYTHONPATH as the runs it serves, so they are the same files), and
warnings printed while importing them are not in the run's stderr.

Protocol, one JSON line each way on stdin/stdout: {script or module, args, cwd, env, out, err} -> {"pid"} when
forked, then {"status"} (os.waitpid's) when it ended; out == err puts both streams in one file. The zygote ends when
its stdin closes (the pytest worker ended).

DDP ranks > 0 fork too: the zygote keeps a second, idle copy of itself (the rank zygote, tests/rank_zygote.py) and
the runs it forks start their ranks through tests/rank_shim.py, a standard-library client that hands the rank's
command, stdio, process group and signal mask to that copy and stands in for the rank (see rank_zygote.py).
Set GPTLAB_TEST_FORKSERVER=0 to run every script in a fresh interpreter instead."""

from __future__ import annotations

import json
import os
import sys

PRELOAD = ("torch", "lightning", "hydra", "omegaconf", "tensorboard", "gptlab.apps.train", "gptlab.apps.evaluate",
           "gptlab.config.entry", "gptlab.launch.cli")


def run_child(request: dict, stdio: list[int] | None = None) -> None:
    """In the forked child: become `python <script> args` and never return. `stdio`: the fds to take as 0, 1 and
    2 (a DDP rank's, passed by its shim); otherwise /dev/null and the request's out and err files."""
    import atexit
    import runpy
    import signal

    code = 1
    try:
        try:  # a rank joins its launcher's group, as Popen's child would; a run leads its own (the client's kill)
            os.setpgid(0, request.get("pgid", 0))
        except OSError:
            os.setpgid(0, 0)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        if stdio is not None:
            for target, fd in enumerate(stdio):
                os.dup2(fd, target)
                os.close(fd)
        else:
            write = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(os.open(request["out"], write, 0o644), 1)
            if request["err"] == request["out"]:  # one log for both, as Popen(stderr=STDOUT) gives
                os.dup2(1, 2)
            else:
                os.dup2(os.open(request["err"], write, 0o644), 2)
        import tempfile

        tempfile.tempdir = None  # the zygote's cached temp dir: the run's own $TMPDIR decides, as in a new process
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1, signal.SIGHUP):
            signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)
        # what the launcher held blocked while it started the rank (gptlab.signals' hold) stays blocked, as inherited
        signal.pthread_sigmask(signal.SIG_SETMASK, request.get("sigmask", []))
        if "OMP_NUM_THREADS" in os.environ:
            import torch

            torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        module = request.get("module")  # `python -m module args`: sys.path[0] is the cwd, argv[0] the module's file
        script = os.path.abspath(request["script"]) if module is None else None
        sys.argv = [script or "-m", *request["args"]]
        extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        first = os.getcwd() if module else os.path.dirname(script)
        sys.path[:] = [first, *extra, *[p for p in SITE_PATH if p not in extra]]
        try:
            if module:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as stop:
            if stop.code is None or isinstance(stop.code, int):
                code = stop.code or 0
            else:
                print(stop.code, file=sys.stderr)
                code = 1
        except BaseException:  # noqa: BLE001  (what the interpreter does with an uncaught exception)
            sys.excepthook(*sys.exc_info())
            code = 1
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


def serve() -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    import rank_zygote

    ranks_dir = rank_zygote.start(run_child)
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # nothing a preloaded module prints can break the protocol
    replies.write(json.dumps({"ready": os.getpid()}) + "\n")
    for line in sys.stdin:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            replies.close()
            run_child(request)
        replies.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"status": status}) + "\n")
    import shutil

    shutil.rmtree(ranks_dir, ignore_errors=True)  # its server ends with this process


# sys.path as a fresh interpreter has it but for the script's own dir and PYTHONPATH (both set per run).
SITE_PATH = [p for p in sys.path[1:] if p not in os.environ.get("PYTHONPATH", "").split(os.pathsep)]

if __name__ == "__main__":
    serve()
