"""The site's HTTP proxy, as a2rl's own connections use it: on clusters whose compute nodes reach the internet
only through a proxy, `HTTPS_PROXY`/`HTTP_PROXY` (lower-case names first, as curl and urllib read them) name it
and `NO_PROXY` the hosts reached directly.

- `open_connection(host, port)`: a TCP connection, through an HTTP CONNECT tunnel of the site proxy unless
  NO_PROXY covers the host (the allowlist relay of `network: api`, run/relay.py). A tunnel uses HTTPS_PROXY,
  else HTTP_PROXY; credentials in the proxy URL (`http://user:pass@host:port`) go as Proxy-Authorization: Basic.
- `urlopen(request)`: urllib's, through the same proxy (for https URLs HTTPS_PROXY, else HTTP_PROXY; for http
  URLs HTTP_PROXY), for the judge and inspector clients; `direct=True` for a2rl's own services (local drivers,
  vLLM), which are on the cluster's network, never behind its proxy.
- NO_PROXY: `*`, host names, domain suffixes (`example.org` and `.example.org` both cover `api.example.org`),
  IP addresses and CIDR ranges (`10.0.0.0/8`); loopback is always direct (a proxy cannot reach this node's).

Only `http://` proxies (the usual site proxy); an `https://` one is refused with the reason. Standard library
only: the agents' relay imports this module.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit
from urllib.request import ProxyHandler, Request, build_opener

LOOPBACK_NAMES = ("localhost", "localhost.localdomain")
MAX_HEAD = 16384  # bytes of a proxy's answer to CONNECT before giving up on it
TUNNEL_TIMEOUT_S = 30.0  # liveness of the proxy's answer only; the tunnel itself has no timeout


class ProxyError(OSError):
    """The site proxy could not be used or refused a tunnel (one line: which proxy, what it answered)."""


@dataclass(frozen=True)
class Proxy:
    host: str
    port: int
    authorization: str | None = None  # the Proxy-Authorization value, from user:pass in the URL
    url: str = ""  # as given (credentials included): for urllib

    def __str__(self) -> str:  # credentials stay out of logs
        return f"http://{self.host}:{self.port}"


def _get(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name.lower()) or environ.get(name.upper()) or ""


def parse(url: str) -> Proxy:
    """`http://[user:pass@]host[:port]` (or `host:port`) → Proxy; port 80 where none is given, as urllib."""
    url = url if "://" in url else f"http://{url}"
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ProxyError(f"proxy {parts.scheme}://{parts.hostname or ''}: only http:// proxies are supported")
    auth = None
    if parts.username is not None:
        creds = f"{unquote(parts.username)}:{unquote(parts.password or '')}".encode()
        auth = "Basic " + base64.b64encode(creds).decode()
    return Proxy(parts.hostname, parts.port or 80, auth, url)


def bypassed(host: str, no_proxy: str) -> bool:
    """Whether a connection to `host` goes direct: loopback, or covered by NO_PROXY."""
    host = host.strip("[]").lower().rstrip(".")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if host in LOOPBACK_NAMES or (ip is not None and ip.is_loopback):
        return True
    for entry in (e.strip().lower() for e in no_proxy.split(",")):
        if entry == "*":
            return True
        if ip is not None and "/" in entry:
            try:
                if ip in ipaddress.ip_network(entry, strict=False):
                    return True
            except ValueError:
                pass
            continue
        name = entry.strip("[]").lstrip(".").rstrip(".")
        if ":" in name and not _is_ip(name):  # host:port entries: the host part
            name = name.rsplit(":", 1)[0]
        if name and (host == name or host.endswith("." + name)):
            return True
    return False


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def proxy_for(host: str, scheme: str = "https", environ: Mapping[str, str] = os.environ) -> Proxy | None:
    """The site proxy for a connection to `host` (https and tunnels: HTTPS_PROXY, else HTTP_PROXY; http:
    HTTP_PROXY), or None: none is set, or NO_PROXY covers the host."""
    names = ("https_proxy", "http_proxy") if scheme == "https" else ("http_proxy",)
    url = next((u for n in names if (u := _get(environ, n))), "")
    if not url or bypassed(host, _get(environ, "no_proxy")):
        return None
    return parse(url)


def tunnel(proxy: Proxy, host: str, port: int, timeout: float = TUNNEL_TIMEOUT_S) -> socket.socket:
    """A connection to host:port through `proxy`'s CONNECT."""
    try:
        s = socket.create_connection((proxy.host, proxy.port), timeout=timeout)
    except OSError as e:
        raise ProxyError(f"the site proxy {proxy} cannot be reached ({e})") from None
    target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    head = f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
    if proxy.authorization:
        head += f"Proxy-Authorization: {proxy.authorization}\r\n"
    try:
        s.sendall((head + "\r\n").encode())
        answer = b""
        while not answer.endswith(b"\r\n\r\n"):  # a byte at a time: nothing past the answer is the proxy's
            byte = s.recv(1)
            if not byte or len(answer) > MAX_HEAD:
                raise ProxyError(f"the site proxy {proxy} closed the connection to CONNECT {target}")
            answer += byte
    except OSError as e:
        s.close()
        raise e if isinstance(e, ProxyError) else ProxyError(f"the site proxy {proxy}: {e}") from None
    status = answer.split(b"\r\n", 1)[0].decode("latin-1")
    if status.split(" ")[1:2] != ["200"]:
        s.close()
        raise ProxyError(f"the site proxy {proxy} answered {status!r} to CONNECT {target}")
    s.settimeout(None)
    return s


def open_connection(host: str, port: int, environ: Mapping[str, str] = os.environ) -> socket.socket:
    """A connection to host:port: through the site proxy's tunnel, or direct where none applies."""
    proxy = proxy_for(host, "https", environ)
    return tunnel(proxy, host, port) if proxy else socket.create_connection((host, port))


def urlopen(request: Request | str, *, timeout: float, direct: bool = False):
    """urllib's urlopen through the site proxy that applies to the URL (none for `direct` and loopback)."""
    url = request.full_url if isinstance(request, Request) else request
    parts = urlsplit(url)
    proxy = None if direct else proxy_for(parts.hostname or "", parts.scheme)
    proxies = {"http": proxy.url, "https": proxy.url} if proxy else {}
    return build_opener(ProxyHandler(proxies)).open(request, timeout=timeout)


def passthrough_env(environ: Mapping[str, str], direct_hosts: list[str]) -> dict[str, str]:
    """The site proxy's variables for a process on the host's network (an agent under `network: full`), with
    loopback and `direct_hosts` (a2rl's own services: the grading server, local drivers) in NO_PROXY; {} where
    the site has no proxy."""
    names = ("https_proxy", "http_proxy")
    if not any(_get(environ, n) for n in names):
        return {}
    env = {name: value for n in names if (value := _get(environ, n)) for name in (n, n.upper())}
    given = [h for h in _get(environ, "no_proxy").split(",") if h.strip()]
    no_proxy = ",".join(dict.fromkeys([*given, "127.0.0.1", "localhost", *direct_hosts]))
    return {**env, "no_proxy": no_proxy, "NO_PROXY": no_proxy}
