"""Signs that held-out data reached an agent: the split's canary (heldout/CANARY, written by prepare) or a
verbatim held-out item. The grader looks in each submission before deleting it; the run report looks in the
transcript and the code snapshots. Plain substring search: it finds copies, not paraphrases.
"""

from __future__ import annotations

import json
import mmap
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

from a2rl.spec.tasks import CANARY

MIN_ITEM_CHARS = 40  # shorter strings (labels, numbers, short answers) turn up in innocent text
MAX_TEXT_BYTES = 16 << 20  # larger submitted files are weights: only the canary is looked for in them, as bytes


@dataclass(frozen=True)
class HeldoutMarkers:
    canary: str | None
    needles: dict[str, str]  # text to look for → its item's label ("test.jsonl:17")

    def find(self, text: str) -> list[str]:
        """What of the held-out split `text` contains: "canary", "held-out item test.jsonl:17", ..."""
        found = ["canary"] if self.canary and self.canary in text else []
        labels = dict.fromkeys(label for needle, label in self.needles.items() if needle in text)
        return found + [f"held-out item {label}" for label in labels]

    def find_bytes(self, data: bytes | mmap.mmap) -> list[str]:
        return ["canary"] if self.canary and data.find(self.canary.encode()) != -1 else []


def markers(heldout_dir: Path) -> HeldoutMarkers:
    """The split's canary and items, read once per prepared split (prepare replaces the directory)."""
    try:
        st = Path(heldout_dir).stat()
    except OSError:  # not prepared here: nothing to look for
        return HeldoutMarkers(None, {})
    return _markers(str(heldout_dir), st.st_ino, st.st_mtime_ns)


@lru_cache(maxsize=16)
def _markers(heldout_dir: str, _ino: int, _mtime_ns: int) -> HeldoutMarkers:
    root = Path(heldout_dir)
    canary = (root / CANARY).read_text().strip() if (root / CANARY).is_file() else None
    needles: dict[str, str] = {}
    for label, item in _items(root):
        # a transcript holds the agent's tool output as JSON strings: quotes, newlines, non-ASCII escaped
        for needle in (item, json.dumps(item)[1:-1], json.dumps(item, ensure_ascii=False)[1:-1]):
            needles.setdefault(needle, label)
    return HeldoutMarkers(canary, needles)


def _items(root: Path) -> Iterator[tuple[str, str]]:
    """(label, text) of each string of ≥ MIN_ITEM_CHARS in the split's JSONL rows and JSON files; an item is a
    JSONL line, or an element (list) or key (object) of a JSON file's top level."""
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".jsonl", ".json")):
        rel, text = path.relative_to(root), path.read_text(errors="replace")
        if path.suffix == ".jsonl":
            units = [(str(n), _loads(line)) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        else:
            value = _loads(text)
            units = [(str(n), v) for n, v in enumerate(value, 1)] if isinstance(value, list) else \
                [(str(k), v) for k, v in value.items()] if isinstance(value, dict) else [("", value)]
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


def scan_files(root: Path, found_in: HeldoutMarkers) -> list[str]:
    """What the files under a submitted model directory contain: "canary in tokenizer_config.json", ..."""
    out = []
    for path in sorted(p for p in Path(root).rglob("*") if p.is_file() and not p.is_symlink()):
        size = path.stat().st_size
        if size == 0:
            continue
        if size <= MAX_TEXT_BYTES:
            data = path.read_bytes()
            try:
                found = found_in.find(data.decode("utf-8"))
            except UnicodeDecodeError:
                found = found_in.find_bytes(data)
        else:
            with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                found = found_in.find_bytes(mm)
        out += [f"{what} in {path.relative_to(root)}" for what in found]
    return out
