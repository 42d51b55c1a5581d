"""What a node sees of a sweep, and the probe job that looks from a compute node (fscheck.py submits it).

The launcher's checks (the isolation audit, the interpreters, the prepared tasks, the model directories) run on
the launching node while the jobs run elsewhere: `node_facts` is taken on both and `differences` names, in one
line each, what the compute node lacks. The probe job also tries the lock the launcher holds (`try_lock`) and
renames its report into the sweep directory, where the launcher measures how late it sees it.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket
import sys
from pathlib import Path

from pydantic import BaseModel

from a2rl.records import Record, now
from a2rl.scheduling.mounts import mount_of
from a2rl.spec.sweep import SweepSpec

PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy")
_UNSUPPORTED = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL}


def probe_dir(directory: Path) -> Path:
    return Path(directory) / "fscheck"


def try_lock(fd: int, close: bool = False) -> str:
    """flock LOCK_EX|LOCK_NB on `fd`: "held" (another holder has it), "got it", or "unsupported: <errno>"."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return "got it"
    except OSError as e:
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return "held"
        if e.errno in _UNSUPPORTED:
            return f"unsupported: {errno.errorcode.get(e.errno, e.errno)} ({e.strerror})"
        raise
    finally:
        if close:
            os.close(fd)


class NodeFacts(BaseModel):
    """One node's view of what the sweep's jobs need."""

    host: str
    fstype: str
    options: str
    isolation: str  # the mode `isolation` resolves to there, or "refused: <why>"
    interpreters: dict[str, bool] = {}  # path → exists and is executable
    tasks: dict[str, bool] = {}  # task → prepared under the data root
    models: dict[str, bool] = {}  # model → its directory exists (built-in: built)
    proxies: dict[str, str] = {}  # the proxy variables set


def node_facts(directory: Path, spec: SweepSpec | None) -> NodeFacts:
    mount = mount_of(directory)
    facts = NodeFacts(
        host=socket.gethostname(),
        fstype=mount.fstype,
        options=mount.options,
        isolation="",
        proxies={k: os.environ[k] for k in PROXY_VARS if os.environ.get(k)},
    )
    if spec is None:
        return facts
    return facts.model_copy(
        update=dict(
            isolation=isolation_here(spec),
            interpreters={str(p): os.access(p, os.X_OK) for p in interpreters(spec)},
            tasks=tasks_prepared(spec),
            models={m.name: model_dir(m.path).is_dir() for m in spec.model_entries},
        )
    )


def isolation_here(spec: SweepSpec) -> str:
    from a2rl.run.isolation import SandboxError, choose

    try:  # what really starts here (a sandbox is started once), as the launch's own choice is made
        return choose(spec.isolation, spec.network).mode
    except SandboxError as e:
        return f"refused: {e}"


def interpreters(spec: SweepSpec) -> list[Path]:
    """The interpreters the sweep's jobs start: the launcher's own (runs, top-up), the grader's, the agents'."""
    from a2rl.spec.sweep import agent_python, grader_python

    return sorted({Path(sys.executable), grader_python(spec) or Path(sys.executable), agent_python(spec)})


def tasks_prepared(spec: SweepSpec) -> dict[str, bool]:
    from a2rl.spec.models import default_data_root
    from a2rl.spec.tasks import get_task

    root = Path(spec.data_root) if spec.data_root else default_data_root()
    paths = [Path(p) for p in spec.task_paths]
    return {name: get_task(name, paths).prepared(root) is not None for name in spec.tasks}


def model_dir(path: str) -> Path:
    from a2rl.spec.models import BUILTIN_PREFIX, builtin_dir

    return builtin_dir(path.removeprefix(BUILTIN_PREFIX)) if path.startswith(BUILTIN_PREFIX) else Path(path)


def differences(here: NodeFacts, there: NodeFacts) -> list[str]:
    """One line per thing the compute node sees otherwise than the launching node (what jobs would trip on)."""
    node = f"compute node {there.host}"
    out = []
    if there.isolation != here.isolation:
        out.append(
            f"{node}: isolation is {there.isolation!r} there but {here.isolation!r} here (the launch's audit ran "
            "here): install the same sandbox on the compute nodes or set `isolation:` to what they have"
        )
    for label, mine, theirs in (
        ("interpreter", here.interpreters, there.interpreters),
        ("prepared task", here.tasks, there.tasks),
        ("model directory", here.models, there.models),
    ):
        for name, ok in sorted(mine.items()):
            if ok and not theirs.get(name, False):
                out.append(
                    f"{node}: {label} {name} is missing there (present here): put it on a file system the compute "
                    "nodes mount at the same path"
                )
    return out


class ProbeReport(Record):
    """What the probe job found on its node (written into the sweep directory's fscheck/ folder)."""

    lock: str  # try_lock's answer while the launcher holds the lock
    facts: NodeFacts
    written_at: float  # the node's clock: for reading, never compared with the launcher's


class NodeProbe:
    """The probe job (submitit pickles it): try the lock the launcher holds, look around, rename the report in."""

    def __init__(self, directory: str, token: str, spec: SweepSpec | None = None):
        self.directory, self.token, self.spec = directory, token, spec

    def __call__(self) -> str:
        where = probe_dir(Path(self.directory))
        lock = try_lock(os.open(where / "lock", os.O_RDWR | os.O_CREAT, 0o644), close=True)
        facts = node_facts(Path(self.directory), self.spec)
        ProbeReport(lock=lock, facts=facts, written_at=now()).dump(where / f"report-{self.token}.json")
        return lock
