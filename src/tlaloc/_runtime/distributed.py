"""The process group of a multi-process run, on XLA's distributed runtime (jaxlib).

``initialize(coordinator, num_processes, process_id)`` connects this process to
the run: process 0 starts the coordination service (jaxlib's
``DistributedRuntimeService``) and every process connects a
``DistributedRuntimeClient`` to it. The client is handed to jax's backend
factory (``jax._src.distributed.global_state``, what ``jax.distributed.initialize``
sets; tlaloc makes its own client so that it controls the exit), so the PJRT CPU
client that ``tlaloc._runtime.pjrt.client`` returns spans every process's devices, with collectives through gloo (on CUDA, the
same runtime sets up NCCL; that path is untested here). Nothing here moves
data: XLA's SPMD partitioner puts the collectives inside the compiled programs.

What this module adds on top:

* ``agree(what, name, fingerprint, items, fix)``: every process publishes what it is
  about to compile in the runtime's key-value store and checks that all agree,
  so a mismatch of program or shapes is refused by name (``DistributedError``)
  instead of hanging in a collective.
* ``lost_peer(error, name)``: a collective that failed because another process is
  gone becomes a ``DistributedError`` that says so.
* A clean exit: at exit every process waits for the others (process 0 hosts the
  coordination service, which must outlive every client's last request) when it
  ends without an uncaught exception and no peer has failed; a failed run exits
  at once with status 1, never waiting for processes that will not come.

Outside a collective, a process that stops sending heartbeats for
``heartbeat_timeout`` seconds makes the coordination service stop the others
(jaxlib's "Terminating process because the JAX distributed service detected
fatal errors"). jaxlib 0.10.2 cannot call a Python ``missed_heartbeat_callback``
instead (its status argument has no Python type: ``std::bad_cast``), so that
message is jaxlib's.

Imports NumPy and jax/jaxlib only, like the rest of ``tlaloc._runtime``.
"""
from __future__ import annotations

import atexit
import dataclasses
import json
import os
import sys

from ..errors import ArgumentError, DistributedError

#: Environment variables ``initialize`` reads (what ``tlaloc launch`` sets), then torchrun's.
ENV = {"coordinator": ("TLALOC_COORDINATOR_ADDRESS", "MASTER_ADDR:MASTER_PORT"),
       "num_processes": ("TLALOC_NUM_PROCESSES", "WORLD_SIZE"),
       "process_id": ("TLALOC_PROCESS_ID", "RANK")}
_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


@dataclasses.dataclass
class Group:
    """This process's place in the run and its connection to the coordination service."""
    coordinator: str
    num_processes: int
    process_id: int
    client: object = None
    service: object = None
    timeout_s: float = 120.0       # how long to wait for the others (agreements, barriers)
    failed: str | None = None       # why the run cannot go on, once known
    seq: int = 0                    # agreements made so far (the same count in every process)

    def next_key(self, kind: str) -> str:
        self.seq += 1
        return f"tlaloc/{kind}/{self.seq}"

    def others(self) -> list:
        return [q for q in range(self.num_processes) if q != self.process_id]


_GROUP: Group | None = None


def group() -> Group | None:
    """The process group, or ``None`` in a single-process run."""
    return _GROUP


def _from_env(name: str):
    ours, theirs = ENV[name]
    if os.environ.get(ours):
        return os.environ[ours]
    if ":" in theirs:
        host, port = (os.environ.get(k) for k in theirs.split(":"))
        return f"{host}:{port}" if host and port else None
    return os.environ.get(theirs) or None


def _as_int(value, name: str, low: int) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ArgumentError(f"tlaloc.distributed.initialize: {name} must be an int, got {value!r}") from None
    if n < low:
        raise ArgumentError(f"tlaloc.distributed.initialize: {name} must be >= {low}, got {n}")
    return n


def _backend_started() -> bool:
    try:
        from jax._src import xla_bridge
        return bool(getattr(xla_bridge, "_backends", {}))
    except Exception:                                      # pragma: no cover  (jax internals moved)
        return False


def initialize(coordinator=None, num_processes=None, process_id=None, *, heartbeat_timeout: int = 10,
               init_timeout: int = 60, timeout: float = 120.0) -> Group:
    """Join a run of ``num_processes`` processes; see ``tlaloc.distributed.initialize``."""
    global _GROUP
    coordinator = coordinator if coordinator is not None else _from_env("coordinator")
    num_processes = num_processes if num_processes is not None else _from_env("num_processes")
    process_id = process_id if process_id is not None else _from_env("process_id")
    missing = [n for n, v in (("coordinator", coordinator), ("num_processes", num_processes),
                              ("process_id", process_id)) if v is None]
    if missing:
        names = ", ".join(f"{n} (or ${ENV[n][0]})" for n in missing)
        raise ArgumentError(f"tlaloc.distributed.initialize: {names} not given; pass them, or start the script "
                            f"with `tlaloc launch -n N script.py`, which sets them")
    n = _as_int(num_processes, "num_processes", 1)
    pid = _as_int(process_id, "process_id", 0)
    if pid >= n:
        raise ArgumentError(f"tlaloc.distributed.initialize: process_id {pid} is not below num_processes {n}")
    host, sep, port = str(coordinator).rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ArgumentError(f"tlaloc.distributed.initialize: coordinator must be 'host:port', got {coordinator!r}")
    if _GROUP is not None:
        if (_GROUP.coordinator, _GROUP.num_processes, _GROUP.process_id) == (coordinator, n, pid):
            return _GROUP
        raise ArgumentError(f"tlaloc.distributed.initialize: this process already joined {_GROUP.coordinator} as "
                            f"process {_GROUP.process_id} of {_GROUP.num_processes}; initialize once per process")
    import jax
    from jax._src import distributed as jax_distributed
    from jaxlib import _jax
    if _backend_started():
        raise ArgumentError("tlaloc.distributed.initialize: call it before the first tl.jit call or jax computation "
                            "of this process (its PJRT client already exists and cannot span processes now)")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    g = Group(str(coordinator), n, pid, timeout_s=float(timeout))
    if pid == 0:
        bind = coordinator if host in _LOOPBACK else f"[::]:{port}"
        try:
            g.service = _jax.get_distributed_runtime_service(bind, n, heartbeat_timeout=int(heartbeat_timeout),
                                                             shutdown_timeout=int(timeout))
        except Exception as e:
            raise DistributedError(f"tlaloc.distributed.initialize: process 0 cannot start the coordination service "
                                   f"on {bind} ({_first_line(e)}); is the port in use? pick another") from None
    _wait_for_coordinator(host, int(port), float(init_timeout), pid, n)
    g.client = _jax.get_distributed_runtime_client(str(coordinator), pid, init_timeout=int(init_timeout),
                                                   heartbeat_timeout=int(heartbeat_timeout),
                                                   shutdown_on_destruction=False, use_compression=True)
    g.client.connect()          # every process registers; jaxlib stops the process if one never does
    state = jax_distributed.global_state              # what jax's backend factory reads
    state.service, state.client = g.service, g.client
    state.process_id, state.num_processes, state.coordinator_address = pid, n, str(coordinator)
    _GROUP = g
    _install_exit_hooks()
    return g


def _wait_for_coordinator(host: str, port: int, seconds: float, pid: int, n: int) -> None:
    """Return once the coordinator accepts connections; ``DistributedError`` after ``seconds``.
    (jaxlib's own connect does not fail with an error: it stops the process.)"""
    import socket
    import time
    deadline = time.monotonic() + seconds
    while True:
        try:
            socket.create_connection((host.strip("[]"), port), timeout=1.0).close()
            return
        except OSError as e:
            if time.monotonic() > deadline:
                raise DistributedError(f"tlaloc.distributed.initialize: process {pid} of {n} found no coordinator "
                                       f"at {host}:{port} within {seconds:g} s ({e}); process 0 starts it: start "
                                       f"every process with the same coordinator address") from None
            time.sleep(0.1)


def _first_line(e) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# -- agreement across processes --------------------------------------------------------------------

def agree(what: str, name: str, fingerprint: str, items: list, fix: str) -> None:
    """Check that every process is about to do the same ``what`` (``"compile"``, ``"inputs"``).

    Each process publishes ``fingerprint`` (a hash of the program and its compile
    options, or of its host inputs) with ``items``, a readable line per part
    (``"argument 3 `x`: float32[32, 64]"``); all fingerprints must be equal. On a
    mismatch the message lists the items that differ (or says that all are equal and
    the programs differ). ``fix`` says what to change.

    Raises:
      DistributedError: a process differs, or did not get here within the group's
        timeout (then the run is marked failed).
    """
    g = _GROUP
    if g is None or g.num_processes == 1:
        return
    key = g.next_key(what)
    g.client.key_value_set(f"{key}/{g.process_id}", json.dumps([fingerprint, items]))
    for q in g.others():
        try:
            theirs, their_items = json.loads(g.client.blocking_key_value_get(f"{key}/{q}", int(g.timeout_s * 1000)))
        except Exception as e:
            raise fail(f"{what} `{name}` (agreement #{g.seq}): {_absent(g, q, e)}; {fix}") from None
        if theirs == fingerprint:
            continue
        diff = [f"    {a}  (process {q}: {b.split(': ', 1)[-1]})" for a, b in zip(items, their_items) if a != b]
        if len(items) != len(their_items):
            diff.append(f"    {len(items)} parts here, {len(their_items)} in process {q}")
        if not diff:
            diff = [f"    the same {len(items)} parts, but the {what} differs (sha256 {fingerprint[:12]} here, "
                    f"{theirs[:12]} in process {q})"]
        raise fail(f"{what} `{name}` (agreement #{g.seq}): process {g.process_id} and process {q} differ:\n"
                   + "\n".join(diff) + f"\n{fix}", fatal=False)


def barrier(name: str) -> None:
    """Wait until every process gets here (``DistributedError`` after the group's timeout)."""
    g = _GROUP
    if g is None or g.num_processes == 1:
        return
    key = g.next_key("barrier").replace("/", "_")
    try:
        g.client.wait_at_barrier(key, int(g.timeout_s * 1000))
    except Exception as e:
        raise fail(f"barrier `{name}`: {_absent(g, None, e)}") from None


def exchange(name: str, value: str) -> list:
    """``value`` of every process, in process order (a small string each: file lists, hashes)."""
    g = _GROUP
    if g is None or g.num_processes == 1:
        return [value]
    key = g.next_key("exchange")
    g.client.key_value_set(f"{key}/{g.process_id}", value)
    out = []
    for q in range(g.num_processes):
        if q == g.process_id:
            out.append(value)
            continue
        try:
            out.append(g.client.blocking_key_value_get(f"{key}/{q}", int(g.timeout_s * 1000)))
        except Exception as e:
            raise fail(f"`{name}`: {_absent(g, q, e)}") from None
    return out


# -- failures --------------------------------------------------------------------------------------

def _absent(g: Group, q, error) -> str:
    """Why process ``q`` (``None``: some process) did not answer, from the runtime's ``error``."""
    who = "not every process" if q is None else f"process {q}"
    if "DEADLINE_EXCEEDED" in str(error):
        return f"{who} did not get there within {g.timeout_s:g} s ({_first_line(error)})"
    return (f"the coordination service did not answer ({_first_line(error)}): process 0, which hosts it, or "
            f"the process waited for has stopped")


def fail(message: str, fatal: bool = True) -> DistributedError:
    """A ``DistributedError`` for this process. ``fatal``: the run cannot go on (a process is
    gone or out of step), so it is marked failed and exits without waiting for the others."""
    g = _GROUP
    where = "" if g is None else f"process {g.process_id} of {g.num_processes}: "
    if fatal and g is not None and g.failed is None:
        g.failed = message
    return DistributedError(f"tlaloc.distributed: {where}{message}")


_PEER_GONE = ("gloo", "connection reset", "connection closed", "broken pipe", "socket closed", "unavailable",
              "heartbeat", "coordination service", "peer")


def lost_peer(error: BaseException, name: str) -> DistributedError | None:
    """``error`` (raised by a program run across processes) as a ``DistributedError`` when it
    says that another process is gone; ``None`` for any other error."""
    g = _GROUP
    if g is None or g.num_processes == 1:
        return None
    text = str(error)
    if not any(s in text.lower() for s in _PEER_GONE):
        return None
    return fail(f"running `{name}`: a collective failed because another process of the run stopped "
                f"({_first_line(error)}); see the other processes' logs for the first error")


_HOOKS = []


def _install_exit_hooks() -> None:
    if _HOOKS:
        return
    previous = sys.excepthook

    def excepthook(kind, value, tb):
        g = _GROUP
        if g is not None and g.failed is None:
            g.failed = f"uncaught {kind.__name__}"
        previous(kind, value, tb)
    sys.excepthook = excepthook
    atexit.register(shutdown)
    _HOOKS.append(excepthook)


def shutdown() -> None:
    """Leave the run. After a clean run, wait until every process gets here (the coordination
    service in process 0 must outlive every client's last request), then disconnect; after a
    failure, exit at once with status 1."""
    global _GROUP
    g = _GROUP
    if g is None:
        return
    _GROUP = None
    if g.failed is None:
        try:
            g.client.wait_at_barrier("tlaloc_exit", int(g.timeout_s * 1000))
        except Exception as e:                             # a peer failed, or never came
            _exit_now(f"tlaloc.distributed: process {g.process_id} of {g.num_processes}: not every process reached "
                      f"the end of the run within {g.timeout_s:g} s ({_first_line(e)}); exiting without them")
        try:
            g.client.shutdown()
        except Exception:                                  # pragma: no cover  (the service left first: all done)
            pass
        if g.service is not None:
            g.service.shutdown()
    else:
        _exit_now(None)    # never wait for peers that will not come; the runtime's objects are not torn down


def _exit_now(message: str | None) -> None:
    if message:
        sys.stderr.write(message + "\n")
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(1)


__all__ = ["Group", "group", "initialize", "agree", "barrier", "exchange", "fail", "lost_peer", "shutdown"]
