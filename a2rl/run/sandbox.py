"""Isolation policies → command lines: what an agent process can see and reach.

A `View` says what the agent needs (its workspace read-write; the base model, its Python environment and its
CLI's directories read-only; the run's GPUs; the unix sockets that carry its network); `wrap` turns it into the
argv of the chosen isolation:

    bwrap      bubblewrap: new user, PID, IPC, UTS (and, unless `network: full`, network) namespaces, no
               capabilities; system directories read-only with /etc's secrets masked; /tmp and /var/tmp on
               the workspace's tmp/ (disk, not host memory); a /proc that lists only the agent's own
               processes; every process ends with the sandbox
    apptainer  the same binds through `apptainer exec --containall --no-home` (not run on this machine)
    none       the command as is: the agent runs as the launcher's user and sees what that user sees (untrusted)

Nothing else is bound: not the data root, the sweep directory, other workspaces, the source tree or the
launcher's HOME (only the parts listed above, at their real paths, so `$WORKSPACE` paths stay valid).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from a2rl.run.isolation import APPTAINER_EXEC, APPTAINER_NO_NET, Choice, find_bwrap, system_links
from a2rl.siteproxy import passthrough_env

ISOLATIONS = ("auto", "bwrap", "apptainer", "none")
NETWORKS = ("full", "api", "none")
SYSTEM_DIRS = ("/usr", "/etc", "/opt", "/sys")  # read-only; /bin, /lib* are links into /usr on Debian 12
ETC_SECRETS = (
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
    "/etc/munge",
    "/etc/slurm",
    "/etc/ssh",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/mysql",
)
SOCKET_DIR = "/run/a2rl"  # where the unix sockets appear inside the sandbox
PROXY_PORT = 3128  # the allowlist proxy's port on the sandbox's loopback (`network: api`)
_GPU = re.compile(r"^nvidia(\d+)$")
_GPU_SHARED = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


def gpu_devices(environ: dict[str, str], dev_names: list[str]) -> list[str]:
    """The /dev entries of the run's GPUs: the allocation's (SLURM_JOB_GPUS, else CUDA_VISIBLE_DEVICES; unset:
    all) plus the shared control devices. `dev_names` is the listing of /dev."""
    present = {int(m.group(1)) for n in dev_names if (m := _GPU.match(n))}
    if not present:
        return []
    given = environ.get("SLURM_JOB_GPUS", environ.get("CUDA_VISIBLE_DEVICES"))
    if given is None:
        wanted = present
    else:
        wanted = {int(i) for i in given.split(",") if i.strip().isdigit()} & present
    if not wanted:
        return []
    shared = [n for n in _GPU_SHARED if n in dev_names]
    caps = ["nvidia-caps"] if "nvidia-caps" in dev_names else []
    return [f"/dev/nvidia{i}" for i in sorted(wanted)] + [f"/dev/{n}" for n in shared + caps]


def python_prefixes(python: Path) -> list[Path]:
    """What an interpreter needs visible: its venv (not resolved: the venv's own path) and, for a venv, the base
    installation its `home` names."""
    venv = python.parent.parent
    prefixes = [venv]
    cfg = venv / "pyvenv.cfg"
    if cfg.is_file():
        for line in cfg.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home":
                prefixes.append(Path(value.strip()).parent)
    else:
        prefixes = [Path(python).resolve().parent.parent]
    return prefixes


@dataclass(frozen=True)
class View:
    workspace: Path  # read-write, at its real path
    python: Path  # the agent's interpreter (its venv and base installation: read-only)
    read_only: list[Path] = field(default_factory=list)  # the base model dir, the stack's CLI directories
    devices: list[str] = field(default_factory=list)  # from gpu_devices
    network: str = "full"
    sockets: dict[str, Path] = field(default_factory=dict)  # name → host path, appearing under SOCKET_DIR
    relays: dict[int, str] = field(default_factory=dict)  # loopback port inside → socket name
    files: dict[Path, Path] = field(default_factory=dict)  # read-only file binds: path inside → host file (logins)
    limit: Callable[[list[str]], list[str]] = lambda argv: argv  # the command as run inside (caps.py's rlimits)

    @property
    def tmp(self) -> Path:
        return self.workspace / "tmp"

    def socket_path(self, name: str) -> str:
        return f"{SOCKET_DIR}/{name}.sock"

    def relayed(self, argv: list[str]) -> list[str]:
        """argv behind the in-sandbox relays (none: argv as is)."""
        if not self.relays:
            return self.limit(argv)
        pairs = [f"{port}={self.socket_path(name)}" for port, name in sorted(self.relays.items())]
        return self.limit([str(self.python), "-m", "a2rl.run.relay", *pairs, "--", *argv])


def _ro_paths(view: View) -> list[Path]:
    prefixes = python_prefixes(view.python)
    seen, out = set(), []
    for p in [*prefixes, *view.read_only]:
        if p.exists() and str(p) not in seen:
            seen.add(str(p))
            out.append(p)
    return out


def _base_site_packages(view: View) -> list[str]:
    """The base installation's own site-packages (not the venv's): masked, it may hold the grader's packages."""
    prefixes = python_prefixes(view.python)
    return [str(p) for base in prefixes[1:] for p in base.glob("lib/python3*/site-packages")]


def bwrap_argv(view: View, argv: list[str], *, cwd: Path, bwrap: str = "bwrap") -> list[str]:
    a = [
        bwrap,
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--cap-drop",
        "ALL",
        "--die-with-parent",
        "--new-session",
    ]
    if view.network != "full":
        a.append("--unshare-net")
    for d in SYSTEM_DIRS:
        if os.path.isdir(d):
            a += ["--ro-bind", d, d]
    a += system_links()
    for secret in ETC_SECRETS:
        if os.path.isdir(secret):
            a += ["--tmpfs", secret, "--remount-ro", secret]
        elif os.path.lexists(secret):
            a += ["--ro-bind", "/dev/null", secret]
    # /tmp and /var/tmp are the workspace's tmp/ (disk, under the workspace cap), never a tmpfs of host memory;
    # /var and /run are read-only (/dev/shm stays: torch needs it; only a memory cgroup bounds it, caps.py)
    a += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--bind",
        str(view.tmp),
        "/tmp",
        "--tmpfs",
        "/run",
        "--tmpfs",
        "/var",
        "--dir",
        "/var/tmp",
        "--remount-ro",
        "/var",
        "--bind",
        str(view.tmp),
        "/var/tmp",
    ]
    for dev in view.devices:
        a += ["--dev-bind", dev, dev]
    for p in _ro_paths(view):
        a += ["--ro-bind", str(p), str(p)]
    for sp in _base_site_packages(view):
        a += ["--tmpfs", sp, "--remount-ro", sp]
    a += ["--bind", str(view.workspace), str(view.workspace)]
    for inside, host in view.files.items():  # over the workspace: what the agent writes there cannot reach them
        a += ["--ro-bind", str(host), str(inside)]
    if view.sockets:
        a += ["--dir", SOCKET_DIR]
        for name, host in view.sockets.items():
            a += ["--bind", str(host), view.socket_path(name)]
    a += ["--remount-ro", "/run"]  # its sockets still connect; nothing is written into host memory there
    a += ["--chdir", str(cwd), "--", *view.relayed(argv)]
    return a


def apptainer_argv(
    view: View, argv: list[str], *, cwd: Path, image: str = "/", apptainer: str = "apptainer"
) -> list[str]:
    """The same policy for clusters where bubblewrap cannot make user namespaces. `--containall` gives private
    /tmp, /dev, PID and IPC namespaces; the host's / as image (a sandbox directory) keeps the system's tools."""
    a = [apptainer, *APPTAINER_EXEC, "--pwd", str(cwd)]
    if view.network != "full":
        a += APPTAINER_NO_NET
    binds = [f"{p}:{p}:ro" for p in _ro_paths(view)] + [f"{view.workspace}:{view.workspace}:rw"]
    binds += [f"{view.tmp}:/tmp:rw", f"{view.tmp}:/var/tmp:rw"]
    binds += [f"{host}:{inside}:ro" for inside, host in view.files.items()]
    binds += [f"{dev}:{dev}" for dev in view.devices]
    binds += [f"{host}:{view.socket_path(name)}" for name, host in view.sockets.items()]
    for b in binds:
        a += ["--bind", b]
    return a + [image, *view.relayed(argv)]


def wrap(
    choice: Choice, view: View, argv: list[str], *, cwd: Path, which: Callable[[str], str | None] = shutil.which
) -> list[str]:
    if choice.mode == "bwrap":
        return bwrap_argv(view, argv, cwd=cwd, bwrap=find_bwrap(which) or "bwrap")
    if choice.mode == "apptainer":
        return apptainer_argv(view, argv, cwd=cwd, apptainer=which("apptainer") or "apptainer")
    return argv


class AgentSandbox:
    """The host side of one agent's sandbox: the chosen isolation, the unix sockets that are its only way out
    when its network is not the host's, and its command line. `forwards` are the host:port services the agent
    must reach (its grading API first, a local driver's server): each appears on the sandbox's loopback at
    the same port. Under `network: api`, HTTPS_PROXY leads to a proxy that relays only to `allow_hosts` (through
    the site's proxy that `environ` names, if any); on the host's network the agent gets the site's proxy."""

    def __init__(
        self,
        choice: Choice,
        network: str,
        *,
        forwards: list[tuple[str, int]],
        allow_hosts: list[str],
        on_refused: Callable[[str], None] = lambda target: None,
        max_connections: int = 64,
        limit: Callable[[list[str]], list[str]] = lambda argv: argv,
        environ: Mapping[str, str] = os.environ,
    ):
        self.choice, self.network, self.environ = choice, network, environ
        self.forwards, self.allow_hosts, self.on_refused = forwards, allow_hosts, on_refused
        self.max_connections, self.limit = max_connections, limit
        self.sockets: dict[str, Path] = {}
        self.relays: dict[int, str] = {}
        self.env: dict[str, str] = {}
        self._servers: list = []
        self._dir: str | None = None

    @property
    def relayed(self) -> bool:
        """Whether the agent's network is its own loopback, reached from outside through unix sockets."""
        return self.choice.mode != "none" and self.network != "full"

    def __enter__(self) -> "AgentSandbox":
        if not self.relayed:  # the host's network: the site's proxy, if any, but never for a2rl's own services
            self.env = passthrough_env(self.environ, sorted({host for host, _ in self.forwards}))
            return self
        from a2rl.run.relay import ConnectProxy, UnixToTCP

        self._dir = tempfile.mkdtemp(prefix="a2rl-net-")
        for i, (host, port) in enumerate(self.forwards):
            name = f"fwd{i}"
            self.sockets[name] = Path(self._dir) / f"{name}.sock"
            self._servers.append(UnixToTCP(str(self.sockets[name]), host, port, self.max_connections, self.on_refused))
            self.relays[port] = name
        if self.network == "api":
            self.sockets["proxy"] = Path(self._dir) / "proxy.sock"
            self._servers.append(
                ConnectProxy(
                    str(self.sockets["proxy"]), self.allow_hosts, self.on_refused, self.max_connections, self.environ
                )
            )
            self.relays[PROXY_PORT] = "proxy"
            proxy = f"http://127.0.0.1:{PROXY_PORT}"
            self.env = {
                "HTTPS_PROXY": proxy,
                "https_proxy": proxy,
                "HTTP_PROXY": proxy,
                "http_proxy": proxy,
                "NO_PROXY": "127.0.0.1,localhost",
                "no_proxy": "127.0.0.1,localhost",
            }
        return self

    def __exit__(self, *exc: object) -> None:
        for s in self._servers:
            s.close()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)

    def command(
        self,
        argv: list[str],
        *,
        workspace: Path,
        python: Path,
        read_only: list[Path],
        cwd: Path,
        environ: dict[str, str] | None = None,
        dev_names: list[str] | None = None,
        files: dict[Path, Path] | None = None,
    ) -> list[str]:
        environ = os.environ if environ is None else environ
        (workspace / "tmp").mkdir(exist_ok=True)  # its /tmp
        dev_names = sorted(os.listdir("/dev")) if dev_names is None else dev_names
        view = View(
            workspace=workspace,
            python=python,
            read_only=read_only,
            devices=gpu_devices(dict(environ), dev_names),
            network=self.network,
            sockets=self.sockets,
            relays=self.relays,
            files=files or {},
            limit=self.limit if self.choice.trusted else (lambda a: a),
        )
        return wrap(self.choice, view, argv, cwd=cwd)


def with_link_targets(dirs: list[Path]) -> list[Path]:
    """The existing `dirs`, each followed by the directories its links point into (an npm prefix's bin/ links
    into lib/node_modules/<package>/, a Hugging Face snapshot's files into blobs/), to bind them all. A local
    npm install's `node_modules/.bin` stands for its whole `node_modules`: a CLI there loads its sibling
    packages (codex its platform binary). A venv's bin/ stands for the venv and the Python it was made from
    (pyvenv.cfg's `home`: its interpreter loads libpython and the standard library from there)."""
    out: list[Path] = []
    for d in dirs:
        if not d.is_dir():
            continue
        if d.name == ".bin" and d.parent.name == "node_modules":
            d = d.parent
        elif d.name == "bin" and (cfg := d.parent / "pyvenv.cfg").is_file():
            d = d.parent
            home = next(
                (
                    line.split("=", 1)[1].strip()
                    for line in cfg.read_text().splitlines()
                    if line.split("=", 1)[0].strip() == "home"
                ),
                None,
            )
            if home and Path(home).is_dir():
                out.append(Path(home).resolve().parent)
        out.append(d)
        out += sorted({e.resolve().parent for e in d.iterdir() if e.is_symlink() and e.exists()} - {d})
    return out
