"""Per-run caps (the sweep's `limits`): what one agent's run may consume, enforced by the kernel where it can
be, measured where it cannot, and each hit named in agent.log and in the run's result (`caps_hit`).

    processes  a pids cgroup of the run's own where this user may make one (root; cgroup v1, or a v2 cgroup
               whose subtree already delegates `pids`), and RLIMIT_NPROC set inside the sandbox, after its user
               namespace exists, so that it counts the sandbox's tasks only, not the user's others (the kernel
               never applies it to root, hence the cgroup)
    memory     a memory cgroup where possible, else RLIMIT_DATA (writable private memory: what a process
               allocates, not the address space it reserves) on each of the agent's processes, not with GPUs
               (the CUDA driver's mappings); on Slurm the job's --mem cgroup holds it as well
    workspace  its bytes, measured every `workspace_check_s`; past the cap the run stops with status `quota`
    /tmp       the sandbox's /tmp and /var/tmp are the workspace's tmp/ (disk, under the workspace cap), never
               host memory (sandbox.py)
    agent.log  cut past its cap, with a marker (process.py)
"""

from __future__ import annotations

import os
import resource
import shutil
from pathlib import Path

from a2rl.recording.diskuse import tree_bytes
from a2rl.spec.sweep import RunLimits
from a2rl.units import GIB

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _own_cgroup(controller: str, proc_cgroup: str) -> tuple[Path, str] | None:
    """(mount, own path) of this process's cgroup holding `controller` (v1 line, else the v2 line)."""
    lines = [line.split(":", 2) for line in proc_cgroup.splitlines() if line.count(":") >= 2]
    for _, names, path in lines:
        if controller in names.split(","):
            return CGROUP_ROOT / controller, path
    for hid, names, path in lines:
        if hid == "0" and names == "":
            for mount in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
                if (mount / "cgroup.controllers").is_file():
                    return mount, path
    return None


class Cgroup:
    """The run's own cgroup in each controller this process may make one in: `pids` (limits.processes) and,
    when `mem_bytes` is given, `memory`. Controllers it may not use are simply absent from `dirs`."""

    LIMIT = {"pids": ("pids.max", "pids.max"), "memory": ("memory.limit_in_bytes", "memory.max")}

    def __init__(self, name: str, *, pids: int, mem_bytes: int | None):
        self.dirs: dict[str, Path] = {}
        try:
            own = Path("/proc/self/cgroup").read_text()
        except OSError:
            return
        wanted = {"pids": pids, **({"memory": mem_bytes} if mem_bytes else {})}
        for controller, value in wanted.items():
            found = _own_cgroup(controller, own)
            if found is None:
                continue
            mount, path = found
            v2 = mount.name != controller
            parent = mount / path.lstrip("/")
            d = parent / name
            try:
                if v2 and controller not in (parent / "cgroup.subtree_control").read_text().split():
                    continue  # not delegated to us
                d.mkdir()
                (d / self.LIMIT[controller][v2]).write_text(str(value))
            except OSError:
                _rmdir(d)
                continue
            self.dirs[controller] = d

    def enter(self) -> None:
        """Move the calling process into the cgroups (in the agent's child, before it execs)."""
        for d in self.dirs.values():
            (d / "cgroup.procs").write_text(str(os.getpid()))

    def hits(self) -> dict[str, int]:
        """How often each limit was hit: forks refused ("pids"), processes killed out of memory ("memory")."""
        out = {}
        for controller, d in self.dirs.items():
            name, key = {"pids": ("pids.events", "max"), "memory": ("memory.events", "oom_kill")}[controller]
            if controller == "memory" and not (d / name).exists():
                name = "memory.oom_control"  # v1
            try:
                fields = dict(line.split() for line in (d / name).read_text().splitlines() if len(line.split()) == 2)
                out[controller] = int(fields.get(key, 0))
            except (OSError, ValueError):
                continue
        return out

    def close(self) -> None:
        for d in self.dirs.values():
            _rmdir(d)


def _rmdir(d: Path) -> None:
    try:
        d.rmdir()
    except OSError:  # gone already, or a last process is still exiting: the kernel frees it when empty
        pass


class RunCaps:
    """The caps of one run: set up before the agent starts, `preexec` in its child, `check` while it runs."""

    def __init__(
        self,
        limits: RunLimits,
        *,
        name: str,
        workspace: Path,
        gpus: int,
        mem_gb: float,
        sandboxed: bool,
        workspace_gb: float | None = None,
    ):
        """`workspace_gb`: the workspace cap where limits.workspace_gb is unset (spec/sizing.py workspace_gb)."""
        self.limits, self.workspace = limits, workspace
        self.workspace_gb = limits.workspace_gb or workspace_gb  # None: over_quota raises (the job always sets it)
        self.mem_bytes = int((limits.mem_gb or mem_gb) * GIB)
        self.cgroup = Cgroup(name, pids=limits.processes, mem_bytes=self.mem_bytes)
        # RLIMIT_DATA only where no cgroup holds memory, and never with GPUs (the CUDA driver's mappings)
        self.rlimit_data = self.mem_bytes if "memory" not in self.cgroup.dirs and gpus == 0 else None
        self.prlimit = shutil.which("prlimit") if sandboxed else None
        self.hit: list[str] = []
        self._reported: dict[str, int] = {}

    def describe(self) -> str:
        lim = self.limits
        procs = [
            "pids cgroup" if "pids" in self.cgroup.dirs else "",
            "RLIMIT_NPROC in the sandbox" if self.prlimit else "",
        ]
        mem = (
            "memory cgroup"
            if "memory" in self.cgroup.dirs
            else "RLIMIT_DATA"
            if self.rlimit_data
            else "only the job's allocation"
        )
        return (
            f"caps: processes {lim.processes} ({' + '.join(p for p in procs if p) or 'not enforceable here'}); "
            f"memory {self.mem_bytes / GIB:g} GiB ({mem}); "
            f"workspace {self.workspace_gb or 0:.3g} GiB (checked every {lim.workspace_check_s:g} s); "
            f"agent.log {lim.agent_log_mb:g} MiB; relay connections {lim.relay_connections}"
        )

    def inner_argv(self, argv: list[str]) -> list[str]:
        """`argv` as the sandbox runs it: under RLIMIT_NPROC, set inside its user namespace."""
        if not self.prlimit:
            return argv
        n = self.limits.processes
        return [self.prlimit, f"--nproc={n}:{n}", "--", *argv]

    def preexec(self) -> None:
        """In the agent's child, before it execs: into the cgroups, under RLIMIT_DATA."""
        self.cgroup.enter()
        if self.rlimit_data:
            resource.setrlimit(resource.RLIMIT_DATA, (self.rlimit_data, self.rlimit_data))

    def over_quota(self) -> str | None:
        """The reason to stop the run, if its workspace has grown past the cap."""
        if self.workspace_gb is None:
            raise ValueError("RunCaps needs limits.workspace_gb or workspace_gb to check the workspace")
        used = tree_bytes(self.workspace)
        cap = self.workspace_gb * GIB
        if used <= cap:
            return None
        reason = f"quota: the workspace holds {used / GIB:.2f} GiB, past limits.workspace_gb={self.workspace_gb:g}"
        self.note(f"workspace: {used / GIB:.2f} GiB > {self.workspace_gb:g} GiB (limits.workspace_gb)")
        return reason

    def new_hits(self) -> list[str]:
        """Kernel-enforced caps hit since the last call, as lines for the log (each also kept in `hit`)."""
        out = []
        for controller, n in self.cgroup.hits().items():
            if n > self._reported.get(controller, 0):
                self._reported[controller] = n
                what = (
                    {
                        "pids": f"processes: {n} fork(s) refused at limits.processes={self.limits.processes}",
                        "memory": f"memory: {n} process(es) killed past {self.mem_bytes / GIB:g} GiB (limits.mem_gb)",
                    }
                )[controller]
                out.append(what)
                self.note(what)
        return out

    def note(self, what: str) -> None:
        """Keep `what` ("<cap>: ...") as the cap's latest word in `hit`."""
        key = what.split(":")[0]
        self.hit = [h for h in self.hit if h.split(":")[0] != key] + [what]

    def close(self) -> None:
        self.cgroup.close()
