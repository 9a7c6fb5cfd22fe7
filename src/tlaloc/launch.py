"""``tlaloc launch -n N script.py ARGS...``: start N processes of a script on this machine.

As ``torchrun --standalone`` does: the coordinator is process 0 on loopback, at a
free port; each process gets ``TLALOC_COORDINATOR_ADDRESS``,
``TLALOC_NUM_PROCESSES`` and ``TLALOC_PROCESS_ID`` (which
``tlaloc.distributed.initialize()`` reads), and every line it prints comes out
prefixed with ``[i]`` (stdout to stdout, stderr to stderr). When a process
fails, the launcher stops the others (SIGTERM, then SIGKILL after ``grace``
seconds) and exits with the failed process's status; it exits 0 when every
process did.

This module starts processes and copies their output; it imports nothing of the
compiler.
"""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

from ._runtime.distributed import ENV

#: What each process is told, in its environment (what ``tlaloc.distributed.initialize()`` reads).
COORDINATOR, NUM_PROCESSES, PROCESS_ID = (ENV[k][0] for k in ("coordinator", "num_processes", "process_id"))


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _copy(stream, out, prefix: str, lock: threading.Lock) -> None:
    """Copy ``stream`` line by line to ``out``, each line prefixed."""
    for raw in iter(stream.readline, b""):
        line = raw.decode("utf-8", "replace")
        with lock:
            out.write(prefix + line if line.endswith("\n") else prefix + line + "\n")
            out.flush()
    stream.close()


def _status(code: int) -> int:
    """A process's return code as an exit status (killed by signal s: 128 + s, as a shell says)."""
    return 128 - code if code < 0 else code


def launch(command: list, nprocs: int, *, host: str = "127.0.0.1", port: int | None = None, env: dict | None = None,
           grace: float = 5.0, timeout: float | None = None, stdout=None, stderr=None) -> int:
    """Run ``command`` (an argv list) as ``nprocs`` processes; return the exit status.

    Args:
      command: the argv of each process, e.g. ``[sys.executable, "train.py", "--epochs", "3"]``.
      nprocs: how many processes (>= 1).
      host, port: the coordinator's address (default: loopback, a free port).
      env: the environment (default ``os.environ``), to which the three variables are added.
      grace: seconds between SIGTERM and SIGKILL when stopping the others.
      timeout: if given, seconds after which every process still running is stopped
        (the status is then 124, as ``timeout(1)`` gives).
      stdout, stderr: where the prefixed lines go (default ``sys.stdout``/``sys.stderr``).

    Returns:
      0 when every process exited 0, else the status of the first that failed, or 124
      after ``timeout``.

    Raises:
      ValueError: ``nprocs`` below 1 or an empty ``command``.
    """
    if int(nprocs) < 1:
        raise ValueError(f"launch: nprocs must be >= 1, got {nprocs}")
    if not command:
        raise ValueError("launch: no command to run")
    stdout, stderr = stdout or sys.stdout, stderr or sys.stderr
    port = free_port(host) if port is None else int(port)
    base = dict(os.environ if env is None else env)
    base.setdefault("PYTHONUNBUFFERED", "1")              # lines arrive as they are printed
    lock = threading.Lock()
    procs, threads = [], []
    for i in range(int(nprocs)):
        child_env = dict(base, **{COORDINATOR: f"{host}:{port}", NUM_PROCESSES: str(nprocs), PROCESS_ID: str(i)})
        p = subprocess.Popen(list(command), env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append(p)
        for stream, out in ((p.stdout, stdout), (p.stderr, stderr)):
            t = threading.Thread(target=_copy, args=(stream, out, f"[{i}] ", lock), daemon=True)
            t.start()
            threads.append(t)
    try:
        status = _watch(procs, grace, stderr, lock, None if timeout is None else time.monotonic() + timeout)
    except KeyboardInterrupt:
        _stop(procs, grace)
        status = 130
    for t in threads:
        t.join(timeout=grace)
    return status


def _say(stderr, lock, message: str) -> None:
    with lock:
        stderr.write(f"tlaloc launch: {message}\n")
        stderr.flush()


def _watch(procs: list, grace: float, stderr, lock, deadline: float | None) -> int:
    """Wait for every process; at the first failure (or the deadline), stop the others and
    return its status (124 at the deadline)."""
    while True:
        if deadline is not None and time.monotonic() > deadline:
            _say(stderr, lock, "time is up; stopping every process")
            _stop(procs, grace)
            return 124
        running = 0
        for i, p in enumerate(procs):
            code = p.poll()
            if code is None:
                running += 1
            elif code != 0:
                _say(stderr, lock, f"process {i} exited with status {_status(code)}; stopping the others")
                _stop(procs, grace)
                return _status(code)
        if not running:
            return 0
        time.sleep(0.05)


def _stop(procs: list, grace: float) -> None:
    """SIGTERM every process still running, then SIGKILL those left after ``grace`` seconds."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


__all__ = ["launch", "free_port", "COORDINATOR", "NUM_PROCESSES", "PROCESS_ID"]
