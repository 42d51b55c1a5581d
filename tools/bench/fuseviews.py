"""Two "nodes'" FUSE views of one directory, for benchmarks: each a bindfs mount of a common directory at the same
path in a mount namespace of its own (held by a `sleep`), with NFS-like 30-s attribute, entry and negative caching
and lock forwarding (`--enable-lock-forwarding`: flock crosses the views, as cluster-wide locks do; without it
`a2rl doctor` refuses the pair), as tests/test_shared_fs.py mounts them per Slurm node. This process's own
namespace sees the common directory at that path through a plain bind mount. Needs root, bindfs and /dev/fuse."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

CACHING = "attr_timeout=30,entry_timeout=30,negative_timeout=30"  # as tests/test_shared_fs.py's views
OPTS = ["--multithreaded", "--enable-lock-forwarding", "-o", CACHING]


def missing() -> str | None:
    """Why the views cannot be made here (one line), or None."""
    if os.geteuid() != 0:
        return "--views mounts a FUSE view per node in a mount namespace of its own: run it as root"
    if shutil.which("bindfs") is None or not Path("/dev/fuse").exists():
        return "--views needs bindfs and /dev/fuse (apt-get install bindfs fuse3)"
    return None


class Views:
    """`path`: the shared directory, the same path in every namespace; `enter(node)`: the command prefix that runs
    a process in that node's namespace (node 0 or 1)."""

    def __init__(self) -> None:
        self.base = Path(tempfile.mkdtemp(prefix="a2rl-bench-views-"))
        self.common, self.path = self.base / "common", self.base / "view"
        self.holders: list[subprocess.Popen] = []

    def __enter__(self) -> Views:
        self.common.mkdir()
        self.path.mkdir()
        for _ in range(2):  # before the bind mount here, so the namespaces do not hold a copy of it
            self.holders.append(subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "86400"]))
        time.sleep(0.5)  # unshare has made the namespaces
        for node in range(2):
            subprocess.run(
                [*self.enter(node), "bindfs", *OPTS, str(self.common), str(self.path)], check=True, timeout=30
            )
        subprocess.run(["mount", "--bind", str(self.common), str(self.path)], check=True, timeout=30)
        return self

    def enter(self, node: int) -> list[str]:
        return ["nsenter", "-t", str(self.holders[node].pid), "-m", "--"]

    def __exit__(self, *exc: object) -> None:
        for node, holder in enumerate(self.holders):
            subprocess.run([*self.enter(node), "umount", str(self.path)], timeout=60)
            holder.send_signal(signal.SIGKILL)
            holder.wait()
        subprocess.run(["umount", str(self.path)], timeout=60)
        shutil.rmtree(self.base, ignore_errors=True)
