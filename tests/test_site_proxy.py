"""The site's HTTP proxy (a2rl/siteproxy.py): a "compute node" network namespace whose only way out is Debian's
tinyproxy (an HTTP CONNECT proxy asking for credentials) on this machine, and an HTTPS stand-in API on an
address of this machine that the namespace has no route to. In it, real bubblewrap sandboxes started as runs
start their agents reach the API through the allowlist relay and tinyproxy (`network: api`) or through tinyproxy
itself (`network: full`), and nothing else; the judge client reaches it through tinyproxy and honours NO_PROXY.
All traffic stays on this machine."""

from __future__ import annotations

import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from a2rl.siteproxy import ProxyError, bypassed, parse, passthrough_env, proxy_for, tunnel, urlopen
from test_sandbox import PY, needs_bwrap

USER, PASSWORD = "a2rl", "s3cret"  # tinyproxy's BasicAuth takes letters and digits


def test_proxy_variables_as_curl_reads_them():
    p = parse("http://a2rl:s3cret%3Awith%40odd%25chars@proxy.example:3128")  # URL-quoted
    assert (p.host, p.port, str(p)) == ("proxy.example", 3128, "http://proxy.example:3128")  # no credentials
    assert p.authorization == "Basic YTJybDpzM2NyZXQ6d2l0aEBvZGQlY2hhcnM="  # base64 of the unquoted pair
    assert parse("proxy.example:8080").port == 8080 and parse("http://proxy.example").port == 80
    with pytest.raises(ProxyError, match="only http:// proxies"):
        parse("https://proxy.example:443")
    env = {"HTTPS_PROXY": "http://upper:1", "https_proxy": "http://lower:2", "HTTP_PROXY": "http://plain:3"}
    assert proxy_for("api.example.org", "https", env).host == "lower"  # lower-case first
    assert proxy_for("api.example.org", "http", env).host == "plain"
    assert proxy_for("api.example.org", "https", {"HTTP_PROXY": "http://plain:3"}).host == "plain"
    assert proxy_for("api.example.org", "http", {"HTTPS_PROXY": "http://s:1"}) is None
    no = "internal.example, .corp.example,10.0.0.0/8,192.168.1.7,host.example:8443"
    for host in ("internal.example", "a.internal.example", "x.corp.example", "10.3.2.1", "192.168.1.7",
                 "host.example", "127.0.0.1", "::1", "localhost", "127.5.5.5"):  # fmt: skip
        assert bypassed(host, no), host
    for host in ("api.example.org", "notinternal.example", "11.0.0.1", "192.168.1.8", "corp.example.org"):
        assert not bypassed(host, no), host
    assert bypassed("anything.example", "*")
    assert proxy_for("10.1.1.1", "https", {**env, "NO_PROXY": "10.0.0.0/8"}) is None


def test_the_host_network_gets_the_site_proxy_but_not_for_a2rls_own_services():
    assert passthrough_env({"PATH": "/bin"}, ["10.1.1.5"]) == {}
    env = passthrough_env({"https_proxy": "http://p:3128", "NO_PROXY": "corp.example"}, ["10.1.1.5", "127.0.0.1"])
    assert env["HTTPS_PROXY"] == env["https_proxy"] == "http://p:3128" and "HTTP_PROXY" not in env
    assert env["NO_PROXY"] == env["no_proxy"] == "corp.example,127.0.0.1,localhost,10.1.1.5"


class _Answer(BaseHTTPRequestHandler):
    def _reply(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append(self.path)
        doc = {"served": self.server.name, "path": self.path}
        if self.path.endswith("/chat/completions"):
            doc = {"model": json.loads(body)["model"], "choices": [{"message": {"content": "via the proxy"}}]}
        data = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _reply

    def log_message(self, *a) -> None:
        pass


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def _https_server(ip: str, name: str, cert: Path, key: Path) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((ip, 0), _Answer)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    server.seen, server.name = [], name
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """netns NS (10.254.K.2) → this machine's 10.254.K.1, where tinyproxy listens; the API on 10.253.K.1, an
    address of this machine's loopback that NS has no route to. Yields what the tests need."""
    assert shutil.which("tinyproxy"), "no tinyproxy: apt-get install tinyproxy (tools/test.sh does)"
    tmp = tmp_path_factory.mktemp("site")
    k = os.getpid() % 250
    ns, host_if, api_ip = f"a2rl-px{k}", f"a2px{k}h", f"10.253.{k}.1"
    proxy_ip, ns_ip = f"10.254.{k}.1", f"10.254.{k}.2"
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    _run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=api.stand-in",
          "-addext", f"subjectAltName=IP:{api_ip}", "-keyout", str(key), "-out", str(cert)])  # fmt: skip
    cleanup = [
        ["ip", "netns", "del", ns],
        ["ip", "link", "del", host_if],
        ["ip", "addr", "del", f"{api_ip}/32", "dev", "lo"],
    ]
    for c in cleanup:
        subprocess.run(c, capture_output=True)
    tinyproxy = servers = None
    try:
        for c in (
            ["ip", "netns", "add", ns],
            ["ip", "link", "add", host_if, "type", "veth", "peer", "name", "eth0", "netns", ns],
            ["ip", "addr", "add", f"{proxy_ip}/30", "dev", host_if],
            ["ip", "link", "set", host_if, "up"],
            ["ip", "-n", ns, "addr", "add", f"{ns_ip}/30", "dev", "eth0"],
            ["ip", "-n", ns, "link", "set", "eth0", "up"],
            ["ip", "-n", ns, "link", "set", "lo", "up"],
            ["ip", "addr", "add", f"{api_ip}/32", "dev", "lo"],
        ):
            _run(c)
        servers = {n: _https_server(api_ip, n, cert, key) for n in ("api", "other")}
        with socket.socket() as s:
            s.bind((proxy_ip, 0))
            port = s.getsockname()[1]
        log = tmp / "tinyproxy.log"
        (tmp / "tinyproxy.conf").write_text(
            f'Port {port}\nListen {proxy_ip}\nTimeout 60\nLogFile "{log}"\nLogLevel Connect\nMaxClients 50\n'
            f"BasicAuth {USER} {PASSWORD}\nAllow {ns_ip}\nAllow {proxy_ip}\n"
        )
        tinyproxy = subprocess.Popen(["tinyproxy", "-d", "-c", str(tmp / "tinyproxy.conf")], stderr=subprocess.PIPE)
        _wait_listening(tinyproxy, proxy_ip, port)
        yield {
            "ns": ns,
            "api": f"{api_ip}:{servers['api'].server_port}",
            "other": f"{api_ip}:{servers['other'].server_port}",
            "proxy": f"http://{USER}:{PASSWORD}@{proxy_ip}:{port}",
            "bad_proxy": f"http://{USER}:wrong@{proxy_ip}:{port}",
            "proxy_plain": f"http://{proxy_ip}:{port}",
            "cert": cert,
            "log": log,
            "seen": {n: s.seen for n, s in servers.items()},
        }
    finally:
        if tinyproxy is not None:
            tinyproxy.terminate()
            tinyproxy.wait()
        for s in (servers or {}).values():
            s.shutdown()
        for c in cleanup:
            subprocess.run(c, capture_output=True)


def _wait_listening(tinyproxy: subprocess.Popen, ip: str, port: int) -> None:
    from conftest import until

    def up() -> bool:
        assert tinyproxy.poll() is None, f"tinyproxy exited: {tinyproxy.stderr.read().decode()}"
        try:
            socket.create_connection((ip, port), timeout=1).close()
            return True
        except OSError:
            return False

    until(up, 30, "tinyproxy listening", every=0.1)


def _in_ns(site, code: str, env: dict[str, str]) -> dict:
    """`code` run by this tree's Python inside the namespace: its JSON answer."""
    p = subprocess.run(
        ["ip", "netns", "exec", site["ns"], sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**{k: v for k, v in os.environ.items() if "proxy" not in k.lower()}, **env},
    )
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


# an agent, as a run starts it: real bubblewrap, the run's relays, the agent environment's proxy variables
AGENT_RUNNER = """
    import json, os, subprocess, tempfile
    from pathlib import Path
    from a2rl.run.isolation import choose
    from a2rl.run.sandbox import AgentSandbox
    network, cert, agent = os.environ["NETWORK"], os.environ["CERT"], os.environ["AGENT"]
    refused = []
    with tempfile.TemporaryDirectory(prefix="a2rl-px-ws-") as tmp, AgentSandbox(
            choose("bwrap"), network, forwards=[("127.0.0.1", 45678)], allow_hosts=[os.environ["API"]],
            on_refused=refused.append) as box:
        ws = Path(tmp)
        (ws / "code").mkdir()
        argv = box.command([os.environ["PY"], "-c", agent], workspace=ws, python=Path(os.environ["PY"]),
                           read_only=[Path(cert).parent], cwd=ws / "code", environ={}, dev_names=[])
        env = {"PATH": "/usr/bin:/bin", "SSL_CERT_FILE": cert, "API": os.environ["API"],
               "OTHER": os.environ["OTHER"], "PROXY": os.environ["PROXY_PLAIN"], **box.env}
        p = subprocess.run(argv, capture_output=True, text=True, cwd=ws / "code", env=env)
    assert p.returncode == 0, p.stderr
    print(json.dumps({"agent": json.loads(p.stdout), "refused": refused, "no_proxy": box.env.get("NO_PROXY")}))
"""
PROBES = """
import json, os, socket, urllib.request
def get(url, context=None):  # urllib as agents use it: HTTPS_PROXY and NO_PROXY from the environment
    try:
        return json.load(urllib.request.urlopen(url, timeout=20, context=context))["served"]
    except Exception as e:
        return "ERR " + str(e)[:200]
def direct(hostport):
    host, port = hostport.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=5).close()
        return "connected"
    except OSError as e:
        return "ERR " + type(e).__name__
"""
AGENT = (
    PROBES
    + """
proxy = os.environ["PROXY"].rsplit("/", 1)[1]
print(json.dumps({"api": get("https://" + os.environ["API"] + "/v1/models"),
                  "other": get("https://" + os.environ["OTHER"] + "/v1/models"),
                  "api_direct": direct(os.environ["API"]), "proxy_direct": direct(proxy)}))
"""
)


@needs_bwrap
def test_an_agent_reaches_its_api_only_through_the_site_proxy(site):
    given = {"API": site["api"], "OTHER": site["other"], "PROXY_PLAIN": site["proxy_plain"], "PY": str(PY)}
    given.update(CERT=str(site["cert"]), AGENT=AGENT, NO_PROXY="localhost,127.0.0.1")

    def agent(network: str, proxy: str) -> dict:
        return _in_ns(site, AGENT_RUNNER, {**given, "NETWORK": network, "HTTPS_PROXY": proxy})

    before = len(site["seen"]["api"])
    api = agent("api", site["proxy"])
    assert api["agent"]["api"] == "api"  # relay → tinyproxy (with the credentials) → the API
    assert api["agent"]["other"].startswith("ERR") and "403" in api["agent"]["other"]  # not in allow_hosts
    assert api["agent"]["api_direct"].startswith("ERR") and api["agent"]["proxy_direct"].startswith("ERR")
    assert api["refused"] == [f"CONNECT {site['other']} (not in allow_hosts)"]
    assert site["seen"]["other"] == [] and site["seen"]["api"][before:] == ["/v1/models"]
    assert f"CONNECT {site['api']}" in site["log"].read_text()
    # the proxy is the path, its credentials are needed: wrong ones give the agent 502 and the job a line
    bad = agent("api", site["bad_proxy"])
    assert bad["agent"]["api"].startswith("ERR") and "502" in bad["agent"]["api"]
    assert bad["refused"][0].startswith(f"CONNECT {site['api']}: the site proxy {site['proxy_plain']} answered")
    assert "wrong" not in json.dumps(bad)  # the password stays out of the log line
    # network: full: the host's network, the site's proxy in the agent's environment (not for a2rl's services)
    full = agent("full", site["proxy"])
    assert full["agent"]["api"] == "api" and full["agent"]["api_direct"].startswith("ERR")
    assert full["no_proxy"] == "localhost,127.0.0.1"  # forwards' host (127.0.0.1) already in it
    assert full["agent"]["other"] == "other"  # the host's network: no allowlist
    assert site["seen"]["api"][before:] == ["/v1/models"] * 2


def test_the_judge_client_goes_through_the_site_proxy_and_honours_no_proxy(site):
    code = f"""
        import json
        from a2rl.llm.judge import ChatClient, JudgeError
        def ask(**kw):
            try:
                c = ChatClient("https://{site["api"]}/v1", "judge-model", retries=0, timeout_s=10, **kw)
                return c.chat([{{"role": "user", "content": "hi"}}], max_tokens=5).text
            except JudgeError as e:
                return "ERR " + str(e)[:300]
        print(json.dumps({{"proxied": ask(), "direct": ask(direct=True)}}))
    """
    cert = {"SSL_CERT_FILE": str(site["cert"])}
    seen = _in_ns(site, code, {"HTTPS_PROXY": site["proxy"], **cert})
    assert seen["proxied"] == "via the proxy"
    assert seen["direct"].startswith("ERR") and "unreachable" in seen["direct"]  # no route but the proxy
    no_proxy = _in_ns(site, code, {"HTTPS_PROXY": site["proxy"], "NO_PROXY": "10.253.0.0/16", **cert})
    assert no_proxy["proxied"].startswith("ERR") and "unreachable" in no_proxy["proxied"]


def test_a_tunnel_through_tinyproxy_needs_its_credentials(site):
    """From this machine (which has a route): siteproxy.tunnel itself, the relay's way through the proxy."""
    host, port = site["api"].rsplit(":", 1)
    with pytest.raises(ProxyError, match=f"the site proxy {site['proxy_plain']} answered 'HTTP/1.0 40"):
        tunnel(parse(site["bad_proxy"]), host, int(port))
    s = tunnel(parse(site["proxy"]), host, int(port))
    ctx = ssl.create_default_context(cafile=str(site["cert"]))
    with ctx.wrap_socket(s, server_hostname=host) as tls:
        tls.sendall(b"GET /tunnelled HTTP/1.0\r\n\r\n")
        assert b'"path": "/tunnelled"' in b"".join(iter(lambda: tls.recv(4096), b""))


def test_loopback_and_direct_never_go_through_a_proxy(monkeypatch):
    """a2rl's own services (a driver's vLLM, its health check) are reached directly even where the site's
    proxy variables point at a dead port."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answer)
    server.seen, server.name = [], "local"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{dead}")
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{dead}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    try:
        for direct in (False, True):
            with urlopen(f"http://127.0.0.1:{server.server_port}/x", timeout=10, direct=direct) as r:
                assert json.load(r)["served"] == "local"
        import urllib.request

        with pytest.raises(OSError):  # urllib's own proxy handling (read now) would have taken the dead proxy
            urllib.request.build_opener().open(f"http://127.0.0.1:{server.server_port}/x", timeout=10)
    finally:
        server.shutdown()


PROXIED_AGENT = (
    PROBES
    + """
import ssl
from pathlib import Path
here = Path(__file__).resolve().parent  # the stack's folder, bound read-only: the stand-in's certificate
ctx = ssl.create_default_context(cafile=str(here / "cert.pem"))
api, other = (here / "targets").read_text().split()
found = {"api": get(f"https://{api}/v1/models", ctx), "other": get(f"https://{other}/v1/models", ctx),
         "api_direct": direct(api), "proxy": os.environ.get("HTTPS_PROXY")}
(Path(os.environ["OUTPUT_DIR"]) / "proxy.json").write_text(json.dumps(found))
"""
)


@needs_bwrap
@pytest.mark.slow  # a whole sweep
def test_a_sweeps_agent_reaches_its_api_through_the_site_proxy(site, tmp_path):
    """`a2rl launch --wait` inside the namespace, the site's proxy in the launching shell, `network: api` with the
    stand-in API in allow_hosts: the run's agent reaches it (relay → tinyproxy), and not the other server."""
    from a2rl.store.sweepdir import SweepDir
    from conftest import write_sweep

    stacks = tmp_path / "agents"
    stacks.mkdir()
    (stacks / "proxied.yaml").write_text('name: proxied\ncommand: ["{python}", "{stack_dir}/proxied.py"]\n')
    (stacks / "proxied.py").write_text(PROXIED_AGENT)
    (stacks / "targets").write_text(f"{site['api']} {site['other']}\n")
    shutil.copy(site["cert"], stacks / "cert.pem")
    path = write_sweep(
        tmp_path, agents=["proxied"], agent_paths=[str(stacks)], network="api", allow_hosts=[site["api"]], budget=30
    )
    env = {**{k: v for k, v in os.environ.items() if "proxy" not in k.lower()}}
    env.update(HTTPS_PROXY=site["proxy"], NO_PROXY="localhost,127.0.0.1")
    before = {n: len(seen) for n, seen in site["seen"].items()}  # the tests before may have reached both
    p = subprocess.run(
        ["ip", "netns", "exec", site["ns"], sys.executable, "-m", "a2rl", "launch", str(path), "--sweep-dir",
         str(tmp_path / "sd"), "--wait"],
        capture_output=True, text=True, timeout=600, env=env,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout + p.stderr
    sweep = SweepDir(tmp_path / "sd")
    (run,) = sweep.runs()
    found = json.loads((sweep.workspace(run.run_id) / "output" / "proxy.json").read_text())
    assert found["api"] == "api" and found["proxy"] == "http://127.0.0.1:3128"  # the relay, not the site proxy
    assert "403" in found["other"] and found["api_direct"].startswith("ERR")
    assert site["seen"]["api"][before["api"] :] == ["/v1/models"] and site["seen"]["other"][before["other"] :] == []
    log = (sweep.run_dir(run.run_id) / "agent.log").read_text()
    assert f"network: refused CONNECT {site['other']} (not in allow_hosts)" in log


class _LoggingProxy:
    """A proxy that notes each request line (CONNECT host:port) and refuses it."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            with c:
                self.lines.append(c.recv(4096).split(b"\r\n")[0].decode("latin-1"))
                c.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


CLI_CALLS = {  # argv after the CLI's name, its variables, files in its HOME: pointed at https://<name>.stand-in.test
    "claude": (["-p", "hi", "--max-turns", "1"], {"ANTHROPIC_BASE_URL": "https://claude.stand-in.test",
               "ANTHROPIC_API_KEY": "x", "IS_SANDBOX": "1"}, {}),
    "codex": (["exec", "--skip-git-repo-check", "-c", 'model_providers.loc={name="loc",base_url='
               '"https://codex.stand-in.test/v1",env_key="OPENAI_API_KEY",wire_api="responses"}', "-c",
               "model_provider=loc", "-m", "m", "hi"], {"OPENAI_API_KEY": "x"}, {}),
    "gemini": (["-p", "hi", "--model", "gemini-2.5-flash", "--yolo"], {"GEMINI_API_KEY": "x",
               "GOOGLE_GEMINI_BASE_URL": "https://gemini.stand-in.test", "GEMINI_CLI_TRUST_WORKSPACE": "true"},
               {".gemini/settings.json": '{"security": {"auth": {"selectedType": "gemini-api-key"}}}'}),
    "opencode": (["run", "-m", "loc/m", "hi"], {}, {"opencode.json": json.dumps({"provider": {"loc": {
                 "npm": "@ai-sdk/openai-compatible", "name": "loc", "models": {"m": {"name": "m"}},
                 "options": {"baseURL": "https://opencode.stand-in.test/v1", "apiKey": "x"}}}})}),
}  # fmt: skip


@pytest.mark.slow  # four real CLIs start
def test_the_agent_clis_send_their_api_calls_through_https_proxy(tmp_path):
    """What the agent's environment carries (the relay under `network: api`, the site's proxy under `full`)
    reaches each real CLI: its API call is a CONNECT to its base URL's host through HTTPS_PROXY."""
    from conftest import until
    from test_real_clis import clis_prefix

    proxy = _LoggingProxy()
    for name, (args, env, files) in CLI_CALLS.items():
        cli = clis_prefix() / "node_modules" / ".bin" / name
        assert cli.exists(), f"{cli} is not installed: run tools/agents/install.sh {name}"
        home = tmp_path / name
        for rel, text in files.items():
            (home / rel).parent.mkdir(parents=True, exist_ok=True)
            (home / rel).write_text(text)
        home.mkdir(exist_ok=True)
        base = {"PATH": os.environ["PATH"], "HOME": str(home), "HTTPS_PROXY": proxy.url, "NO_PROXY": "127.0.0.1"}
        quiet = {"stdin": subprocess.DEVNULL, "stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        p = subprocess.Popen([str(cli), *args], cwd=home, env={**base, **env}, start_new_session=True, **quiet)
        try:
            connect = f"CONNECT {name}.stand-in.test:443 HTTP/1.1"
            until(lambda connect=connect: connect in proxy.lines, 120, f"{name}'s CONNECT")
        finally:
            os.killpg(p.pid, 9)
            p.wait()
    proxy.listener.close()
