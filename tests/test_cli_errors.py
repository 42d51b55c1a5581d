"""One-line errors from the command line: `a2rl submit` against grading servers that misbehave in every way a
loopback server can, and the sweep commands on a directory that is not a sweep."""

from __future__ import annotations

import json
import socket
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from a2rl.cli.main import main
from conftest import a2rl


def read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), 0
    )
    while len(body) < length:
        body += conn.recv(65536)
    return body


def http_answer(status: int, body: bytes, *, length: int | None = None) -> Callable[[socket.socket], None]:
    def act(conn: socket.socket) -> None:
        conn.sendall(
            f"HTTP/1.1 {status} X\r\nContent-Length: {len(body) if length is None else length}\r\n"
            f"Connection: close\r\n\r\n".encode()
            + body
        )

    return act


def reset(conn: socket.socket) -> None:
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends RST


def hang(conn: socket.socket) -> None:
    conn.recv(1)  # until the client gives up


@contextmanager
def server(act: Callable[[socket.socket], None]) -> Iterator[str]:
    """A loopback server that reads one request and then does `act` on the connection before closing it."""
    sock = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        try:
            conn, _ = sock.accept()
        except OSError:  # the client never came (shut down below)
            return
        with conn:
            read_request(conn)
            act(conn)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}/prefix"
    finally:
        sock.shutdown(socket.SHUT_RDWR)  # wakes a pending accept()
        thread.join()
        sock.close()


def submit(url: str, monkeypatch, capsys, *extra: str) -> tuple[int, str, str]:
    monkeypatch.setenv("GRADING_SERVER_URL", url)
    rc = main(["submit", "output/v1", *extra])
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_error_line(rc: int, err: str, *needles: str) -> None:
    assert rc != 0
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for needle in needles:
        assert needle in lines[0], err


@pytest.mark.parametrize(
    "act, needles",
    [
        (http_answer(500, b'{"error": "grading broke:\\nKeyError"}'), ["grading broke: KeyError (HTTP 500)"]),
        (http_answer(502, b"<html>\n<h1>Bad Gateway</h1>\n</html>"), ["HTTP 502 without a JSON object", "Bad Gateway"]),
        (http_answer(404, b""), ["HTTP 404 without a JSON object"]),
        (http_answer(200, b"not json at all"), ["HTTP 200 without a JSON object"]),
        (http_answer(200, b"[1, 2]"), ["HTTP 200 without a JSON object"]),
        (http_answer(200, b'{"score": 1', length=100), ["broke off the answer"]),  # closed mid-body
        (lambda conn: None, ["broke off the answer"]),  # closed without an answer
        (reset, ["grading server at http://127.0.0.1"]),
    ],
    ids=[
        "http-error-json",
        "http-error-html",
        "http-error-empty",
        "ok-not-json",
        "ok-json-list",
        "truncated",
        "closed",
        "reset",
    ],
)
def test_submit_prints_one_error_line_whatever_the_server_does(act, needles, monkeypatch, capsys):
    with server(act) as url:
        rc, out, err = submit(url, monkeypatch, capsys)
    assert_one_error_line(rc, err, *needles)


def test_submit_keeps_the_json_answer_of_an_http_error_on_stdout(monkeypatch, capsys):
    with server(http_answer(403, b'{"error": "the budget is used up"}')) as url:
        rc, out, err = submit(url, monkeypatch, capsys)
    assert_one_error_line(rc, err, "the budget is used up (HTTP 403)")
    assert json.loads(out) == {"error": "the budget is used up"}


def test_submit_gives_up_after_its_timeout(monkeypatch, capsys):
    with server(hang) as url:
        rc, out, err = submit(url, monkeypatch, capsys, "--timeout", "0.2")
    assert_one_error_line(rc, err, "did not answer within 0.2 s")


def test_submit_to_a_closed_port(monkeypatch, capsys):
    sock = socket.create_server(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    rc, out, err = submit(f"http://127.0.0.1:{port}/p", monkeypatch, capsys)
    assert_one_error_line(rc, err, "cannot reach the grading server", "refused")


def test_submit_success_prints_the_answer(monkeypatch, capsys):
    answer = {"submission_id": "s1", "score": 40.0}
    with server(http_answer(200, json.dumps(answer).encode())) as url:
        rc, out, err = submit(url, monkeypatch, capsys)
    assert (rc, json.loads(out), err) == (0, answer, "")


@pytest.mark.parametrize("cmd", [["status"], ["cancel"], ["grade"], ["runreport"], ["aggregate"], ["inspect"]])
@pytest.mark.parametrize("which", ["empty", "missing"])
def test_sweep_commands_on_a_directory_that_is_not_a_sweep(cmd, which, tmp_path):
    target = tmp_path / "empty" if which == "empty" else tmp_path / "missing"
    if which == "empty":
        target.mkdir()
    proc = a2rl(*cmd, str(target), timeout=120)
    assert proc.returncode == 2, proc.stderr
    expected = (
        f"{target} is not a sweep directory (no sweep.json)"
        if which == "empty"
        else f"{target} does not exist (a launch writes a2rl-sweeps/<sweep name> unless given --sweep-dir)"
    )
    assert proc.stderr.splitlines() == [f"error: {expected}"]


def test_python_m_a2rl_aggregate_on_a_directory_that_is_not_a_sweep(tmp_path):
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "a2rl.aggregate", str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [f"error: {tmp_path} is not a sweep directory (no sweep.json)"]
