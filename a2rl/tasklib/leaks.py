"""Signs that held-out data reached an agent: the split's canary (heldout/CANARY, written by prepare) or a
held-out item. The grader looks in each submission before deleting it; the run report looks in the transcript
and the code snapshots.

What is found: the canary or an item of at least MIN_ITEM_CHARS characters, verbatim; after normalisation (case,
punctuation and whitespace, JSON and Python string escapes such as \\n, \\" and \\u00e9 undone); and inside
base64 (standard or URL-safe, one run, or lines of one), hex, gzip, bzip2, xz and zip members (nested up to
MAX_DEPTH layers, each unpacked up to MAX_UNPACKED bytes). What is not: paraphrases, translations, items cut
into pieces or shorter than MIN_ITEM_CHARS, other encodings (rot13, URL-encoding, base32, XOR, encryption),
and anything in files larger than MAX_TEXT_BYTES (weights: only the canary is looked for there, as bytes).
"""

from __future__ import annotations

import binascii
import bz2
import io
import json
import lzma
import mmap
import re
import zipfile
import zlib
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any, Callable, Iterator

from a2rl.spec.tasks import CANARY

MIN_ITEM_CHARS = 40  # shorter strings (labels, numbers, short answers) turn up in innocent text
MIN_NORMALISED_CHARS = 30  # an item that normalises shorter (mostly punctuation) is looked for verbatim only
MAX_TEXT_BYTES = 16 << 20  # larger submitted files are weights: only the canary is looked for in them, as bytes
MAX_DEPTH = 3  # encodings within encodings (base64 of a gzip of ...)
MAX_UNPACKED = 64 << 20  # bytes taken from one compressed stream or archive member
MAX_MEMBERS = 256  # zip members looked into

_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|[nrtbf\"'\\/])")
_SIMPLE_ESCAPES = {"n": "\n", "r": "\r", "t": "\t", "b": "\b", "f": "\f"}
_NON_WORD = re.compile(r"[\W_]+")
# base64 (standard or URL-safe, maybe split into lines) long enough to hold an item; hex likewise
# (each starts only where a run starts: a regex tried inside every word would cost a pass per character)
_BASE64 = re.compile(r"(?<![A-Za-z0-9+/_-])[A-Za-z0-9+/_-]{40,}={0,2}(?:[ \t]*\r?\n[ \t]*[A-Za-z0-9+/_-]{4,}={0,2})*")
_HEX = re.compile(r"(?<![0-9a-fA-F])(?:[0-9a-fA-F]{2}){40,}")
# Normalised items are found through anchors: ANCHOR characters of an item from a word's start (its second
# word: its first may be glued to what precedes it). A text's anchors, one per word, come out of one regex in C
# and meet the items' in a set intersection; only an item whose anchor is there is searched for in full.
ANCHOR = 20
_WORD_STARTS = re.compile(r"(?:^| )(?=(.{%d}))" % ANCHOR, re.S)
_CHUNK = 1 << 22  # characters per round of anchors (bounds the memory of the strings)


def _unescape(m: re.Match) -> str:
    e = m.group(1)
    if e[0] in "ux":
        return chr(int(e[1:], 16))
    return _SIMPLE_ESCAPES.get(e, e)


def normalise(text: str) -> str:
    """Lower case; string escapes undone; every run of punctuation, symbols and whitespace one space."""
    if "\\" in text:
        text = _ESCAPE.sub(_unescape, text)
    return _NON_WORD.sub(" ", text.lower()).strip()


@dataclass(frozen=True)
class HeldoutMarkers:
    canary: str | None
    verbatim: dict[str, tuple[str, ...]]  # an item's label ("test.jsonl:17") → it and its JSON-escaped forms
    normalised: dict[str, str]  # normalise(item) → its label
    short: dict[str, str]  # verbatim forms of the items too short once normalised → their label

    def find(self, text: str) -> list[str]:
        """What of the held-out split `text` holds: "canary", "held-out item test.jsonl:17" (verbatim),
        "held-out item test.jsonl:3 (normalised)", "... (base64, gzip)" (how it was encoded)."""
        return _labels(self._find_text(text, (), 0))

    def find_bytes(self, data: bytes | mmap.mmap) -> list[str]:
        """A file's content: archives and compressed streams unpacked, text searched as `find` does; a file
        larger than MAX_TEXT_BYTES (weights) only for the canary, as bytes."""
        if len(data) > MAX_TEXT_BYTES:
            return ["canary"] if self.canary and data.find(self.canary.encode()) != -1 else []
        return _labels(self._find_data(bytes(data), (), 0))

    def _find_text(self, text: str, how: tuple[str, ...], depth: int) -> dict[str, tuple[str, ...]]:
        found: dict[str, tuple[str, ...]] = {}
        if self.canary and self.canary in text:
            found["canary"] = how
        norm = normalise(text)
        if self.canary and normalise(self.canary) in norm:
            found.setdefault("canary", (*how, "normalised"))
        for needle, label in self._candidates(norm):
            if needle in norm:
                verbatim = any(n in text for n in self.verbatim[label])
                found.setdefault(f"held-out item {label}", how if verbatim else (*how, "normalised"))
        for needle, label in self.short.items():
            if needle in text:
                found.setdefault(f"held-out item {label}", how)
        if depth < MAX_DEPTH:
            for kind, data in _encoded(text):
                for what, h in self._find_data(data, (*how, kind), depth + 1).items():
                    found.setdefault(what, h)
        return found

    @cached_property
    def _anchors(self) -> tuple[dict[str, list[tuple[str, str]]], list[tuple[str, str]]]:
        """anchor → the (normalised item, label) pairs it stands for; and the items too short for one."""
        anchors: dict[str, list[tuple[str, str]]] = {}
        unanchored = []
        for needle, label in self.normalised.items():
            start = needle.find(" ") + 1
            if start and len(needle) - start >= ANCHOR:
                anchors.setdefault(needle[start : start + ANCHOR], []).append((needle, label))
            else:
                unanchored.append((needle, label))
        return anchors, unanchored

    def _candidates(self, norm: str) -> list[tuple[str, str]]:
        """The normalised items whose anchor `norm` holds (and those without one)."""
        anchors, out = self._anchors
        out = list(out)
        seen: set[str] = set()
        for start in range(0, len(norm), _CHUNK):
            seen |= anchors.keys() & set(_WORD_STARTS.findall(norm, start, start + _CHUNK + ANCHOR))
        return out + [pair for a in seen for pair in anchors[a]]

    def _find_data(self, data: bytes, how: tuple[str, ...], depth: int) -> dict[str, tuple[str, ...]]:
        if depth <= MAX_DEPTH:
            for kind, unpack in _CONTAINERS:
                if (parts := unpack(data)) is not None:
                    found: dict[str, tuple[str, ...]] = {}
                    for name, part in parts:
                        for what, h in self._find_data(part, (*how, f"{kind}{name}"), depth + 1).items():
                            found.setdefault(what, h)
                    return found
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            if not how:  # a binary file: items stored as UTF-8 bytes still read as text
                text = data.decode("latin-1")
            else:  # decoded: text with a garbled edge (a run that took in a word next to it), or garbage
                text = data.decode("utf-8", errors="replace")
                if text.count("\ufffd") * 10 > len(text):
                    return {}
        return self._find_text(text, how, depth)


def _labels(found: dict[str, tuple[str, ...]]) -> list[str]:
    return [what + (f" ({', '.join(how)})" if how else "") for what, how in found.items()]


def _encoded(text: str) -> Iterator[tuple[str, bytes]]:
    """("base64" | "hex", bytes) of every run in `text` that decodes."""
    for m in _BASE64.finditer(text):
        run = re.sub(r"\s+", "", m.group()).rstrip("=")
        run = run.replace("-", "+").replace("_", "/")
        for skip in range(4):  # the run may start with characters that are not part of the encoding
            body = run[skip:]
            body = body[:-1] if len(body) % 4 == 1 else body  # one character cannot end a group of three bytes
            try:
                yield "base64", binascii.a2b_base64(body + "=" * (-len(body) % 4))
            except binascii.Error:
                continue
    for m in _HEX.finditer(text):
        for skip in (0, 1):
            run = m.group()[skip:]
            yield "hex", bytes.fromhex(run[: len(run) // 2 * 2])


def _gunzip(data: bytes) -> list[tuple[str, bytes]] | None:
    if not data.startswith(b"\x1f\x8b"):
        return None
    try:
        return [("", zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, MAX_UNPACKED))]
    except zlib.error:
        return None


def _bunzip(data: bytes) -> list[tuple[str, bytes]] | None:
    if not data.startswith(b"BZh"):
        return None
    try:
        return [("", bz2.BZ2Decompressor().decompress(data, MAX_UNPACKED))]
    except (OSError, ValueError):
        return None


def _unxz(data: bytes) -> list[tuple[str, bytes]] | None:
    if not data.startswith(b"\xfd7zXZ\x00"):
        return None
    try:
        return [("", lzma.LZMADecompressor().decompress(data, MAX_UNPACKED))]
    except lzma.LZMAError:
        return None


def _unzip(data: bytes) -> list[tuple[str, bytes]] | None:
    if not data.startswith(b"PK\x03\x04"):
        return None
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            out = []
            for info in z.infolist()[:MAX_MEMBERS]:
                with z.open(info) as f:
                    out.append((f" member {info.filename}", f.read(MAX_UNPACKED)))
            return out
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError, zlib.error):
        return None


_CONTAINERS: list[tuple[str, Callable[[bytes], list[tuple[str, bytes]] | None]]] = [
    ("gzip", _gunzip),
    ("bzip2", _bunzip),
    ("xz", _unxz),
    ("zip", _unzip),
]


def markers(heldout_dir: Path) -> HeldoutMarkers:
    """The split's canary and items, read once per prepared split (prepare replaces the directory)."""
    try:
        st = Path(heldout_dir).stat()
    except OSError:  # not prepared here: nothing to look for
        return HeldoutMarkers(None, {}, {}, {})
    return _markers(str(heldout_dir), st.st_ino, st.st_mtime_ns)


@lru_cache(maxsize=16)
def _markers(heldout_dir: str, _ino: int, _mtime_ns: int) -> HeldoutMarkers:
    root = Path(heldout_dir)
    canary = read_canary(root)
    verbatim: dict[str, tuple[str, ...]] = {}
    normalised: dict[str, str] = {}
    short: dict[str, str] = {}
    for label, item in _items(root):
        # a transcript holds the agent's tool output as JSON strings: quotes, newlines, non-ASCII escaped
        forms = tuple(dict.fromkeys((item, json.dumps(item)[1:-1], json.dumps(item, ensure_ascii=False)[1:-1])))
        if label in verbatim:  # a row with several long strings: each is looked for
            forms = verbatim[label] + forms
        verbatim[label] = forms
        if len(norm := normalise(item)) >= MIN_NORMALISED_CHARS:
            normalised.setdefault(norm, label)
        else:
            short.update({f: label for f in forms if f not in short})
    return HeldoutMarkers(canary, verbatim, normalised, short)


def read_canary(heldout_dir: Path) -> str | None:
    """The split's canary; None where the split has none (or is not prepared here)."""
    path = Path(heldout_dir) / CANARY
    return path.read_text().strip() if path.is_file() else None


def _items(root: Path) -> Iterator[tuple[str, str]]:
    """(label, text) of each string of ≥ MIN_ITEM_CHARS in the split's JSONL rows and JSON files; an item is a
    JSONL line, or an element (list) or key (object) of a JSON file's top level."""
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json")):
        rel, text = path.relative_to(root), path.read_text(errors="replace")
        if path.suffix == ".jsonl":
            units = [(str(n), _loads(line)) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        else:
            value = _loads(text)
            units = (
                [(str(n), v) for n, v in enumerate(value, 1)]
                if isinstance(value, list)
                else [(str(k), v) for k, v in value.items()]
                if isinstance(value, dict)
                else [("", value)]
            )
        for key, value in units:
            for item in _strings(value):
                yield f"{rel}:{key}" if key else str(rel), item


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:  # not JSON after all: nothing to take from it
        return None


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        if len(value.strip()) >= MIN_ITEM_CHARS:
            yield value.strip()
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def scan_files(root: Path, found_in: HeldoutMarkers, canary_in: list[str] | None = None) -> list[str]:
    """What the files under a submitted model directory contain: "canary in tokenizer_config.json", ...
    `canary_in`: where the freeze's copy found the canary (run/onecopy.py, verified by grading/frozenscan.py):
    files larger than MAX_TEXT_BYTES, searched only for the canary, are then taken from it, not read again."""
    out = []
    for path in sorted(p for p in Path(root).rglob("*") if p.is_file() and not p.is_symlink()):
        size = path.stat().st_size
        if size == 0:
            continue
        if canary_in is not None and size > MAX_TEXT_BYTES:
            out += [f"canary in {path.relative_to(root)}"] if str(path.relative_to(root)) in canary_in else []
            continue
        if size <= MAX_TEXT_BYTES:
            found = found_in.find_bytes(path.read_bytes())
        else:
            with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                found = found_in.find_bytes(mm)
        out += [f"{what} in {path.relative_to(root)}" for what in found]
    return out
