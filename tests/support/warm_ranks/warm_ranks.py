"""Warm engine ranks for the test suite: one preloaded interpreter per test worker forks
the engine processes that torchrun starts, so that each rank skips the ~4 CPU-s of
importing torch, transformers and the engine (most of a test rank's life on 2 cores),
and the suite's `python -m fsdpspec validate|plan|…` calls (~0.2 CPU-s each, thousands).

Everything else is the real thing. `fsdpspec run` starts the real torchrun, which starts
`python -u -m fsdpspec_runners.engine …` as always; this directory's sitecustomize runs
first in that process and, when FSDPSPEC_TEST_WARM_RANKS names this server's socket,
hands its argv, environment, working directory and stdin/stdout/stderr to the server.
The server forks a copy of itself that becomes the rank (``python -m`` from there on),
and the small process stays in torchrun's place: it passes signals on, dies with the
rank's exit status, and its death (a test's SIGKILL) kills the rank.

A rank is forked only where a fresh interpreter would import the same modules the same
way: the same Python, options and import-time environment (``identity``), and the same
network and mount namespaces (a Slurm node's rank starts cold). Anything else starts
cold, as without this directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    import socket

SOCKET_ENV = "FSDPSPEC_TEST_WARM_RANKS"
ENGINE = b"fsdpspec_runners.engine"
# `python -m fsdpspec COMMAND …` of the commands that neither manage processes nor name
# their own pid (`run` writes its pid into the run directory's lock): forked too.
CLI, CLI_COMMANDS = b"fsdpspec", {b"validate", b"plan", b"import", b"export", b"explain",
                                   b"init", b"schema", b"rules", b"show", b"tune"}
# What the server imports before it forks: what a training rank imports, and the
# checkpoint and model code every engine test reaches.
PRELOAD = ("fsdpspec.cli.main", "fsdpspec_runners.engine.train", "torch.distributed.checkpoint",
           "transformers.models.llama.modeling_llama", "safetensors.torch")
# Set per process by torchrun, pytest and fsdpspec and read only once the engine runs,
# never while a module imports: they may differ between the server and a rank.
_RUNTIME = ("RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "WORLD_SIZE",
            "LOCAL_WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR",
            "MASTER_PORT", "OMP_NUM_THREADS", "PWD", "OLDPWD", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
            "TORCH_DISABLE_SHARE_RDZV_TCP_STORE", "TORCHINDUCTOR_CACHE_DIR", "SHLVL", "_",
            "COLUMNS", "LINES", "PYTHONPATH")  # PYTHONPATH: compared by _path_change
_RUNTIME_PREFIXES = ("TORCHELASTIC_", "PYTEST_", "FSDPSPEC_")
# Read while importing only as another name's default: huggingface_hub's HF_HOME (the
# tests set HF_HOME for the session, and XDG_CACHE_HOME per test).
_DEFAULT_OF = {"XDG_CACHE_HOME": "HF_HOME"}
# Read while importing a module the server does not preload (the rank imports it itself):
# the names that start so, and their reader.
_READ_BY = {"HF_DATASETS_": "datasets", "MLFLOW_": "mlflow", "WANDB_": "wandb"}
# The stops torchrun and the tests send a worker; SIGKILL ends the small process and,
# through the server, the rank.
_FORWARDED = ("SIGINT", "SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGQUIT")


def _interpreter(cmdline: list[bytes]) -> list[bytes]:
    """The Python and its options: the words before ``-m`` or the script."""
    words = [cmdline[0]]
    for word in cmdline[1:]:
        if word == b"-m" or not word.startswith(b"-"):
            break
        words.append(word)
    return words


def process(cmdline: list[bytes]) -> dict:
    """This process as the server compares it: its Python and options, environment and
    namespaces."""
    return {
        # the binary and the environment it starts in (a venv's python and python3 are
        # one), and its options
        # one), and its options; -u is the child's own (_become sets the streams so)
        "python": [os.path.realpath(sys.executable), sys.prefix,
                   *(word.decode(errors="surrogateescape") for word in _interpreter(cmdline)[1:]
                     if word != b"-u")],
        "environ": dict(os.environ),
        "namespaces": [os.stat(f"/proc/self/ns/{space}").st_ino for space in ("net", "mnt")],
    }


def identity(described: dict) -> dict:
    """What decides how the server's preloaded modules would import in the process
    ``described``: the environment less the names they never read while importing."""
    environ = described["environ"]
    return {**described, "environ": {
        name: value for name, value in environ.items()
        if name not in _RUNTIME and not name.startswith(_RUNTIME_PREFIXES)
        and not (name in _DEFAULT_OF and environ.get(_DEFAULT_OF[name]))
        and all(module in sys.modules for prefix, module in _READ_BY.items()
                if name.startswith(prefix))}}


def _differences(own: dict, other: dict) -> list[str]:
    """The names of what differs between two identities, for the server's log."""
    names = [part for part in ("python", "namespaces") if own[part] != other[part]]
    mine, theirs = own["environ"], other["environ"]
    return names + sorted(name for name in mine.keys() | theirs.keys()
                          if mine.get(name) != theirs.get(name))


def _python_path(environ: dict[str, str]) -> list[str]:
    return [os.path.abspath(entry) for entry in environ.get("PYTHONPATH", "").split(os.pathsep)
            if entry]


def _path_change(environ: dict[str, str]) -> str | None:
    """How the rank's PYTHONPATH would have changed an import here (None if it would
    not): a rank may add directories (the tests add the repository and tests/support),
    as long as none holds a module this process imported from elsewhere. Every entry of
    this process's must be the rank's too."""
    own, theirs = _python_path(dict(os.environ)), _python_path(environ)
    if not set(own) <= set(theirs):
        return "PYTHONPATH lacks " + ", ".join(sorted(set(own) - set(theirs)))
    for entry in (entry for entry in theirs if entry not in own):
        for name, module in list(sys.modules.items()):
            file = getattr(module, "__file__", None)
            for candidate in (os.path.join(entry, f"{name}.py"),
                              os.path.join(entry, name, "__init__.py")):
                if "." not in name and os.path.exists(candidate) and not (
                        file and os.path.samefile(candidate, file)):
                    return f"PYTHONPATH's {entry} holds {name}"
    return None


def _cmdline() -> list[bytes]:
    with open("/proc/self/cmdline", "rb") as file:
        return file.read().split(b"\0")[:-1]


# --- the small process in torchrun's place ---------------------------------------------

def _target(cmdline: list[bytes]) -> tuple[str, str, list[str]] | None:
    """("module", name, args) for ``python … -m fsdpspec_runners.engine ARGS``, ("script",
    path, args) for ``python … tests/support/NAME.py ARGS`` (the suite's own launches:
    engine_batch.py); None for any other process, which starts as always."""
    rest = cmdline[len(_interpreter(cmdline)):]
    text = [word.decode(errors="surrogateescape") for word in rest]
    if rest[:2] == [b"-m", ENGINE] or (
            rest[:2] == [b"-m", CLI]
            and next((word for word in rest[2:] if not word.startswith(b"-")), None)
            in CLI_COMMANDS):
        return ("module", text[1], text[2:])
    if rest and rest[0].endswith(b".py"):
        script = os.path.realpath(text[0])
        if os.path.dirname(script) == os.path.dirname(os.path.dirname(os.path.realpath(__file__))):
            return ("script", script, text[1:])
    return None


def hand_over() -> None:
    """In an engine rank's interpreter, before it imports anything: let the server fork
    the rank and stand in for it until it ends. Returns where the rank starts cold."""
    path = os.environ.get(SOCKET_ENV)
    if not path:
        return
    cmdline = _cmdline()
    target = _target(cmdline)
    if target is None:
        return
    import json
    import signal
    import socket

    request = {"process": process(cmdline), "target": target, "executable": sys.executable,
               "cwd": os.getcwd(), "unbuffered": b"-u" in _interpreter(cmdline)}
    server = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        server.connect(path)
        socket.send_fds(server, [json.dumps(request).encode(errors="surrogateescape")],
                        [0, 1, 2])
        answer = server.recv(64).decode()
    except OSError:
        return
    if not answer.startswith("pid "):  # "cold": this process differs from the server
        return
    rank = int(answer.split()[1])
    try:
        _stand_in(rank, server)
    except BaseException as error:  # never fall through to running the rank cold as well
        print(f"warm ranks: {error!r}", file=sys.stderr)
        _relay(rank, signal.SIGKILL)
    os._exit(1)


def _relay(rank: int, signum: int) -> None:
    """Pass a signal on to the rank. It may have ended already (torchrun stops every
    worker once one fails, and the server may have reaped it): its status is on its way."""
    try:
        os.kill(rank, signum)
    except ProcessLookupError:
        pass


def _stand_in(rank: int, server: socket.socket) -> None:
    """Relay signals to the rank until the server reports its end, then end the same way."""
    import signal

    for name in _FORWARDED:
        signal.signal(getattr(signal, name), lambda signum, _frame: _relay(rank, signum))
    try:
        status = server.recv(64).decode()
    except OSError:
        status = ""
    if not status:  # the server is gone: so is the rank
        _relay(rank, signal.SIGKILL)
        print("warm ranks: the server ended before the rank", file=sys.stderr)
        os._exit(1)
    how, number = status.split()
    if how == "signal":  # die as the rank died, so torchrun reports the same
        if int(number) in {getattr(signal, name) for name in _FORWARDED}:  # relayed above
            signal.signal(int(number), signal.SIG_DFL)
        os.kill(os.getpid(), int(number))
    os._exit(int(number) if how == "exit" else 128 + int(number))


# --- the server ------------------------------------------------------------------------

def start(socket_path: str, log: IO[str]) -> subprocess.Popen:
    """Start a server at ``socket_path`` for the processes this one starts from now on
    (PYTHONPATH gets this directory, so that they find the sitecustomize), logging to
    ``log``. Closing its stdin ends it and the ranks it forked."""
    here = os.path.dirname(os.path.realpath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [here, *filter(None, [os.environ.get("PYTHONPATH")])])
    # OMP_NUM_THREADS is each rank's own (torchrun sets 1): the server preloads without it
    server = subprocess.Popen(
        [sys.executable, "-u", os.path.realpath(__file__), socket_path], stdin=subprocess.PIPE,
        stdout=log, stderr=subprocess.STDOUT,
        env={name: value for name, value in os.environ.items() if name != "OMP_NUM_THREADS"})
    os.environ[SOCKET_ENV] = socket_path
    return server


def _reset_signals() -> None:
    import signal

    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _why_cold(request: dict | None, own: dict, fds: list[int]) -> str | None:
    """Why the process that asked must start as always (None: fork it)."""
    if request is None or len(fds) != 3:
        return "the process ended before it asked"
    theirs = identity(request["process"])
    if theirs != own:
        return "it differs in " + ", ".join(_differences(own, theirs))
    return _path_change(request["process"]["environ"])


def _become(request: dict, fds: list[int]) -> None:
    """In the forked child: take the small process's stdio, directory, environment and
    module search path."""
    own = _python_path(dict(os.environ))
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["process"]["environ"])
    kind, name, args = request["target"]
    sys.argv = [name, *args]
    sys.executable = request["executable"]
    # as python sets it: the directory of `-m` or of the script, PYTHONPATH, the rest
    sys.path[:] = [os.getcwd() if kind == "module" else os.path.dirname(name),
                   *_python_path(request["process"]["environ"]),
                   *(entry for entry in sys.path[1:] if entry not in own)]
    # the streams as python makes them, with -u or without (the server runs with -u)
    unbuffered = request["unbuffered"]
    sys.stdout.reconfigure(write_through=unbuffered,
                           line_buffering=not unbuffered and os.isatty(1))
    sys.stderr.reconfigure(write_through=unbuffered, line_buffering=True)
    threads = os.environ.get("OMP_NUM_THREADS")
    if threads:  # read by OpenMP when torch loaded, in the server, where it was unset
        import torch

        torch.set_num_threads(int(threads))


def serve(path: str) -> dict:
    """Serve forks until stdin (the test worker's pipe) closes; returns only in a forked
    child, with the request it is to run."""
    import contextlib
    import importlib
    import json
    import selectors
    import signal
    import socket
    import threading

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    for name in PRELOAD:
        importlib.import_module(name)
    own = identity(process(_cmdline()))
    # Fork from a process where no Python thread runs (numpy's OpenBLAS keeps a native
    # pool, which it rebuilds after a fork, as in every forked DataLoader worker).
    assert threading.active_count() == 1, "an import started a thread"
    wake_read, wake_write = socket.socketpair()
    wake_write.setblocking(False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_write.fileno())
    selector = selectors.DefaultSelector()
    selector.register(sys.stdin, selectors.EVENT_READ, "stdin")
    selector.register(listener, selectors.EVENT_READ, "listener")
    selector.register(wake_read, selectors.EVENT_READ, "child")
    ranks: dict[int, socket.socket] = {}
    while True:
        for event, _ in selector.select():
            if event.data == "stdin" and not os.read(0, 4096):
                for rank in ranks:
                    os.kill(rank, signal.SIGKILL)
                raise SystemExit(0)
            if event.data == "child":
                wake_read.recv(4096)
                while ranks:
                    rank, status = os.waitpid(-1, os.WNOHANG)
                    if not rank:
                        break
                    client = ranks.pop(rank)
                    if client.fileno() != -1:
                        selector.unregister(client)
                    how = ("signal", os.WTERMSIG(status)) if os.WIFSIGNALED(status) else \
                        ("exit", os.waitstatus_to_exitcode(status))
                    if client.fileno() != -1:
                        with contextlib.suppress(OSError):  # it died as the rank ended
                            client.send(f"{how[0]} {how[1]}".encode())
                        client.close()
            if event.data == "listener":
                client, _ = listener.accept()
                try:
                    message, fds, _, _ = socket.recv_fds(client, 1 << 20, 3)
                except OSError:
                    message, fds = b"", []
                request = json.loads(message.decode(errors="surrogateescape")) \
                    if message else None
                why = _why_cold(request, own, fds)
                if why:
                    print(f"warm ranks: a cold start: {why}", file=sys.stderr)
                    with contextlib.suppress(OSError):
                        client.send(b"cold")
                    client.close()
                    for fd in fds:
                        os.close(fd)
                    continue
                rank = os.fork()
                if rank == 0:
                    selector.close()
                    for sock in (listener, wake_read, wake_write, client, *ranks.values()):
                        sock.close()
                    _reset_signals()
                    _become(request, fds)
                    return request
                for fd in fds:
                    os.close(fd)
                print(f"warm ranks: rank {request['process']['environ'].get('RANK', '?')} "
                      f"of {request['target'][1]} forked as pid {rank}", file=sys.stderr)
                client.send(f"pid {rank}".encode())
                ranks[rank] = client
                selector.register(client, selectors.EVENT_READ, rank)
            if isinstance(event.data, int) and event.fileobj.fileno() != -1 \
                    and not event.fileobj.recv(64):
                # the small process died (a test killed it): the rank goes with it
                selector.unregister(event.fileobj)
                event.fileobj.close()
                os.kill(event.data, signal.SIGKILL)


if __name__ == "__main__":
    import runpy

    kind, name, _ = serve(sys.argv[1])["target"]
    if kind == "module":
        runpy.run_module(name, run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(name, run_name="__main__")
