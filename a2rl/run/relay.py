"""Byte relays between TCP and unix sockets: how an agent whose network namespace has only a loopback reaches its
grading server (and, under `network: api`, an allowlisted proxy) through unix sockets bound into its sandbox.

Inside the sandbox, `python -m a2rl.run.relay PORT=SOCKET ... -- CMD...` listens on 127.0.0.1:PORT for each pair,
forks a relay that forwards every connection to SOCKET, and execs CMD (so the agent stays the sandbox's main
process and its exit status is the run's). Outside, `UnixToTCP` serves a unix socket for a TCP address, and
`ConnectProxy` serves one that relays HTTP CONNECT only to allowlisted hosts (through the site's proxy where
there is one). Standard library only (and a2rl.siteproxy, which is too): this module runs in the agent's own
environment.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from typing import Callable

from a2rl.siteproxy import ProxyError, open_connection


def _pump(a: socket.socket, b: socket.socket) -> None:
    def one_way(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    t = threading.Thread(target=one_way, args=(b, a), daemon=True)
    t.start()
    one_way(a, b)
    t.join()
    a.close()
    b.close()


def _serve(
    listener: socket.socket,
    connect: Callable[[socket.socket], socket.socket | None],
    max_connections: int | None = None,
    on_refused: Callable[[str], None] = lambda what: None,
) -> None:
    """Accept until the listener closes; `connect` returns the far side for a client, or None to drop it. At
    most `max_connections` are relayed at once (two threads each): one past that is closed at once."""
    slots = threading.BoundedSemaphore(max_connections) if max_connections else None
    refused = 0

    def handle(client: socket.socket) -> None:
        try:
            try:
                far = connect(client)
            except OSError:
                far = None
            if far is None:
                client.close()
                return
            _pump(client, far)
        finally:
            if slots is not None:
                slots.release()

    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        if slots is not None and not slots.acquire(blocking=False):
            client.close()
            refused += 1
            if refused & (refused - 1) == 0:  # 1st, 2nd, 4th, ...: a flood of them cannot flood the log
                on_refused(f"{refused} connection(s) past limits.relay_connections={max_connections}")
            continue
        threading.Thread(target=handle, args=(client,), daemon=True).start()


class _Server:
    def __init__(
        self, path: str, max_connections: int | None = None, on_refused: Callable[[str], None] = lambda what: None
    ):
        self.path, self.max_connections, self.on_refused = path, max_connections, on_refused
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(path)
        self.listener.listen(64)

    def start(self, connect: Callable[[socket.socket], socket.socket | None]) -> None:
        threading.Thread(
            target=_serve, args=(self.listener, connect, self.max_connections, self.on_refused), daemon=True
        ).start()

    def close(self) -> None:
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class UnixToTCP(_Server):
    """A unix socket at `path` whose connections go to host:port (at most `max_connections` at once)."""

    def __init__(
        self,
        path: str,
        host: str,
        port: int,
        max_connections: int | None = None,
        on_refused: Callable[[str], None] = lambda what: None,
    ):
        super().__init__(path, max_connections, on_refused)
        self.start(lambda _: socket.create_connection((host, port)))


class ConnectProxy(_Server):
    """A unix socket at `path` speaking HTTP CONNECT, relaying only to `allowed` host:port pairs ('host' alone
    means port 443), through the site's proxy where `environ` names one (siteproxy.py: HTTPS_PROXY, NO_PROXY):
    the site proxy is the path, never a wider allowlist. Anything else gets 403, a failed site proxy 502; both
    are logged through `on_refused`."""

    def __init__(
        self,
        path: str,
        allowed: list[str],
        on_refused: Callable[[str], None] = lambda target: None,
        max_connections: int | None = None,
        environ: Mapping[str, str] = os.environ,
    ):
        super().__init__(path, max_connections, on_refused)
        self.allowed = {a if ":" in a else f"{a}:443" for a in allowed}
        self.environ = environ
        self.start(self._connect)

    def _connect(self, client: socket.socket) -> socket.socket | None:
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 16384:
            chunk = client.recv(4096)
            if not chunk:
                return None
            head += chunk
        method, _, rest = head.split(b"\r\n", 1)[0].decode("latin-1").partition(" ")
        target = rest.split(" ", 1)[0]
        if method != "CONNECT" or target not in self.allowed:
            self.on_refused(f"{method} {target} (not in allow_hosts)")
            client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return None
        host, _, port = target.rpartition(":")
        try:
            far = open_connection(host, int(port), self.environ)
        except ProxyError as e:
            self.on_refused(f"{method} {target}: {e}")
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return None
        client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
        extra = head.split(b"\r\n\r\n", 1)[1]  # bytes the client sent past the header (TLS hello)
        if extra:
            far.sendall(extra)
        return far


def main(argv: list[str]) -> int:
    """PORT=SOCKET ... -- CMD...: listen first (so the agent never races its relays), fork them, exec CMD."""
    split = argv.index("--")
    listeners = []
    for pair in argv[:split]:
        port, _, path = pair.partition("=")
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", int(port)))
        s.listen(64)
        listeners.append((s, path))
    cmd_pid = os.getpid()  # CMD's, once exec'd; read before the fork, as CMD may be gone before the child runs
    if os.fork() == 0:  # the relays: they end with CMD (and with the sandbox's PID namespace, where there is one)

        def to_unix(path: str) -> Callable[[socket.socket], socket.socket]:
            def connect(_: socket.socket) -> socket.socket:
                far = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                far.connect(path)
                return far

            return connect

        threads = [threading.Thread(target=_serve, args=(s, to_unix(p)), daemon=True) for s, p in listeners]
        for t in threads:
            t.start()
        while os.getppid() == cmd_pid:  # reparented: CMD has ended (outside a PID namespace, e.g. apptainer)
            time.sleep(0.2)
        os._exit(0)
    for s, _ in listeners:
        s.close()
    cmd = argv[split + 1 :]
    os.execvp(cmd[0], cmd)
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
