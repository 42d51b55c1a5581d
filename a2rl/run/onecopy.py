"""The freeze's copy with the grader's reads folded in: each checked file is read into user space once, written to
the frozen copy, and the same buffers feed the content hash and lineage samples (grading/onepass.Digester, in
weights_hash's order) and the search for the split's canary. The grader then verifies the signed result
(grading/frozenscan.py) instead of reading the frozen copy twice more.

The weights' bytes are read tensor by tensor in sorted-name order (the hash's order), each tensor written at its
own offset, then the header and the bytes no tensor covers, so every byte of the copy is written exactly once from
a buffer that was hashed and searched: the digest is the frozen copy's, whatever the agent writes into its files
meanwhile. A header that does not parse, or tensors whose bytes overlap (one byte read twice could differ between
the reads), get the plain copy and no result: the grader reads the frozen copy itself, as before. A file is read
from the descriptor that was checked, never past its checked size (Changed where it shrank or grew), as
recording/nofollow.copy_exact does. Reading runs in this thread, writing in one worker and hashing and searching in
another (hashlib and the writes release the GIL), so the disk and the CPU overlap.
"""

from __future__ import annotations

import errno
import json
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import BinaryIO

from a2rl.grading.onepass import BLOCK, Digester, Scanned
from a2rl.recording.nofollow import Changed
from a2rl.weights import MAX_HEADER_BYTES

BUFFERS = 3  # blocks in flight: one being read, one being written and hashed, one spare
AHEAD = 64 << 20  # bytes asked of the disk ahead of the read (posix_fadvise WILLNEED): one block's wait at a time
# leaves the disk idle (measured here: 4 MiB reads 180 MB/s, with this 400 MB/s, sendfile 500 MB/s)


@dataclass
class Layout:
    """A safetensors file's header bytes, its entries (`__metadata__` left out) and its tensors' absolute byte
    ranges."""

    head: bytes
    header: dict
    ranges: list[tuple[int, int]] = field(default_factory=list)


@dataclass
class CopyScan:
    scanned: Scanned
    canary_in: list[str]  # the files holding the canary


class Canary:
    """Where the canary lies in the files copied, searched block by block: each block in itself, and where blocks
    meet, from the blocks' edges (their first and last len-1 bytes) put back in file order."""

    def __init__(self, canary: bytes | None):
        self.canary = canary
        self.found: set[str] = set()
        self.edges: dict[str, list[tuple[int, bytes]]] = {}

    def look(self, name: str, offset: int, buf: bytes | bytearray, n: int) -> None:
        """The `n` bytes at the start of `buf`, at `offset` in the file `name`."""
        if not self.canary:
            return
        if name not in self.found and buf.find(self.canary, 0, n) != -1:
            self.found.add(name)
        k, view = len(self.canary) - 1, memoryview(buf)[:n]
        edges = self.edges.setdefault(name, [])
        if len(view) <= 2 * k:
            edges.append((offset, bytes(view)))
        else:
            edges += [(offset, bytes(view[:k])), (offset + len(view) - k, bytes(view[len(view) - k :]))]

    def files(self) -> list[str]:
        for name, edges in self.edges.items():
            run, end = b"", -1
            for offset, data in sorted(edges):
                if offset > end:  # a gap inside one block, searched with it
                    if self.canary in run:
                        self.found.add(name)
                    run, end = b"", offset
                run += data[end - offset :]
                end = max(end, offset + len(data))
            if self.canary and self.canary in run:
                self.found.add(name)
        return sorted(self.found)


def layout(src: int, size: int) -> Layout | None:
    """The header read once from `src` (what the copy writes) and its tensors' ranges; None for a header that
    does not parse or ranges that leave the file."""
    raw = os.pread(src, 8, 0)
    n = int.from_bytes(raw, "little") if len(raw) == 8 else -1
    if n < 0 or n > min(MAX_HEADER_BYTES, size - 8):
        return None
    head = raw + os.pread(src, n, 8)
    try:
        header = json.loads(head[8:])
        header.pop("__metadata__", None)
        out = Layout(head, header)
        for info in header.values():
            begin, end = info["data_offsets"]
            ok = isinstance(info["dtype"], str) and all(isinstance(d, int) for d in info["shape"])
            if not (ok and isinstance(begin, int) and isinstance(end, int) and 0 <= begin <= end <= size - 8 - n):
                return None
        return out if len(head) == 8 + n else None
    except (ValueError, TypeError, KeyError, AttributeError):
        return None


def plan(files: dict[str, BinaryIO], sizes: dict[str, int], kept: list[str]):
    """weights_hash's tensors of the kept safetensors files: name -> (file, start, end, header entry), as
    weights.safetensors_index reads them from the frozen copy; and each file's Layout. None where the copy cannot
    be scanned (see the module's note)."""
    layouts: dict[str, Layout] = {}
    tensors: dict[str, tuple[str, int, int, dict]] = {}
    for name in sorted(n for n in kept if n.endswith(".safetensors")):
        if (lay := layout(files[name].fileno(), sizes[name])) is None:
            return None
        layouts[name] = lay
        start = len(lay.head)
        tensors.update(
            {t: (name, start + i["data_offsets"][0], start + i["data_offsets"][1], i) for t, i in lay.header.items()}
        )
    for name, begin, end, _ in tensors.values():
        layouts[name].ranges.append((begin, end))
    for lay in layouts.values():
        lay.ranges.sort()
        if any(a[1] > b[0] for a, b in zip(lay.ranges, lay.ranges[1:])):
            return None
    return tensors, layouts


class Copier:
    """Blocks read here; each written by one worker thread and, at the same time, hashed and searched by another,
    each worker in the order read. A buffer is read into again once both are done with it."""

    def __init__(self, files: dict[str, BinaryIO], sizes: dict[str, int], copies: dict[str, BinaryIO], canary: Canary):
        self.files, self.sizes, self.copies, self.canary = files, sizes, copies, canary
        self.digester = Digester()
        self.writer, self.scanner = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
        self.bufs = [bytearray(BLOCK) for _ in range(BUFFERS)]
        self.pending: list[list[Future]] = [[] for _ in range(BUFFERS)]
        self.k = 0
        self.calls: list[Future] = []

    def copy(self, name: str, begin: int, end: int, hashed: bool = False) -> None:
        src, dst = self.files[name].fileno(), self.copies[name].fileno()
        pos, advised = begin, begin
        while pos < end:
            if pos >= advised:
                os.posix_fadvise(src, pos, min(AHEAD, end - pos), os.POSIX_FADV_WILLNEED)
                advised = pos + AHEAD // 2
            slot = self.k % BUFFERS
            for f in self.pending[slot]:
                f.result()  # its buffer is free again
            buf = self.bufs[slot]
            n = os.preadv(src, [memoryview(buf)[: min(BLOCK, end - pos)]], pos)
            if n == 0:
                raise Changed(errno.EIO, f"shrank from {self.sizes[name]} bytes while it was copied", name)
            self.pending[slot] = [
                self.writer.submit(_write, dst, buf, pos, n),
                self.scanner.submit(self._scan, name, buf, pos, n, hashed),
            ]
            self.k += 1
            pos += n

    def _scan(self, name: str, buf: bytearray, pos: int, n: int, hashed: bool) -> None:
        if hashed:
            self.digester.feed(buf, n)
        self.canary.look(name, pos, buf, n)

    def head(self, name: str, head: bytes) -> None:
        """A header as it was read and parsed (never read again: the copy holds the header the plan used)."""
        self.calls.append(self.writer.submit(_write, self.copies[name].fileno(), head, 0, len(head)))
        self.call(self.canary.look, name, 0, head, len(head))

    def call(self, fn, *args) -> None:
        """`fn` in the scanning worker, after every block submitted so far."""
        self.calls.append(self.scanner.submit(fn, *args))

    def finish(self) -> None:
        self.writer.shutdown(wait=True)
        self.scanner.shutdown(wait=True)
        for f in [*(f for fs in self.pending for f in fs), *self.calls]:
            f.result()


def _write(dst: int, buf: bytes | bytearray, pos: int, n: int) -> None:
    view, done = memoryview(buf)[:n], 0
    while done < n:
        done += os.pwrite(dst, view[done:], pos + done)


def copy_scanned(
    files: dict[str, BinaryIO],
    sizes: dict[str, int],
    kept: list[str],
    copies: dict[str, BinaryIO],
    canary: str | None,
) -> CopyScan | None:
    """Copy every kept file into its open copy, exactly its checked size; the hash, samples and canary from the
    same reads, or None (and a plain copy) where the layout cannot be scanned. Changed names the file."""
    planned = plan(files, sizes, kept)
    if planned is None:
        return None
    tensors, layouts = planned
    finder = Canary(canary.encode() if canary else None)
    c = Copier(files, sizes, copies, finder)
    digester = c.digester
    try:
        for t in sorted(tensors):
            name, begin, end, info = tensors[t]
            c.call(digester.tensor, t, info)
            c.copy(name, begin, end, hashed=True)
            c.call(digester.done)
        for name in kept:
            if name in layouts:
                c.head(name, layouts[name].head)
            for begin, end in uncovered(layouts.get(name), sizes[name]):
                c.copy(name, begin, end)
    finally:
        c.finish()
    for name in kept:
        if os.pread(files[name].fileno(), 1, sizes[name]):
            raise Changed(errno.EIO, f"grew past {sizes[name]} bytes while it was copied", name)
    return CopyScan(digester.result(), finder.files())


def uncovered(lay: Layout | None, size: int) -> list[tuple[int, int]]:
    """The byte ranges of a file no tensor and no header covers (a whole file that is not weights)."""
    out, pos = [], len(lay.head) if lay is not None else 0
    for begin, end in lay.ranges if lay is not None else []:
        if begin > pos:
            out.append((pos, begin))
        pos = max(pos, end)
    return out + ([(pos, size)] if size > pos else [])
