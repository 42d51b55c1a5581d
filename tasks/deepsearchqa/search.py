"""DeepSearchQA's search backends (standard library only: prepare ships this file to the agent as search.py).

    backend = make_backend({"backend": "local", "corpus": "corpus.sqlite"})   # or "serpapi", "duckduckgo", "auto"
    backend.search("capital of Encais0")  # → [{"title", "snippet", "url"}], best first, at most k

- `local`: BM25 (SQLite FTS5's bm25()) over passages of a public corpus that `a2rl prepare deepsearchqa` builds
  (build_index). Offline and deterministic: the default.
- `serpapi`: SerpAPI's Google results (the reference's first choice), with a key in $SERPAPI_KEY or `api_key`.
- `duckduckgo`: DuckDuckGo's instant-answer API (the reference's fallback without a key): an abstract and a few
  related topics, often nothing.
- `auto`: the reference's choice, serpapi when a key is there, else local (never the network without a key).
- "package.module:factory": any other backend, called with the options mapping.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sqlite3
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Iterable, Protocol

Result = dict[str, str]  # {"title", "snippet", "url"}


class SearchBackend(Protocol):
    def search(self, query: str) -> list[Result]: ...


def build_index(docs: Iterable[dict[str, str]], path: str | Path) -> int:
    """Write an FTS5 index of {"title", "text", "url"} passages to `path`; the number of passages."""
    path = Path(path)
    path.unlink(missing_ok=True)
    with sqlite3.connect(path) as db:
        db.execute("CREATE VIRTUAL TABLE passages USING fts5(title, text, url UNINDEXED, tokenize='porter unicode61')")
        db.executemany(
            "INSERT INTO passages (title, text, url) VALUES (?, ?, ?)",
            ((d.get("title", ""), d["text"], d.get("url", "")) for d in docs),
        )
        n = db.execute("SELECT count(*) FROM passages").fetchone()[0]
    db.close()
    return n


class LocalSearch:
    """BM25 over an FTS5 index (build_index); a query matches passages holding any of its words. Ties go to the
    earlier passage, so results are deterministic."""

    def __init__(self, corpus: str | Path, *, k: int = 3, snippet_chars: int = 300):
        if not Path(corpus).is_file():
            raise FileNotFoundError(f"deepsearchqa: no search corpus at {corpus}: run `a2rl prepare deepsearchqa`")
        self.db = sqlite3.connect(f"file:{corpus}?mode=ro", uri=True, check_same_thread=False)
        self.k, self.snippet_chars = k, snippet_chars

    def search(self, query: str) -> list[Result]:
        words = re.findall(r"\w+", query.lower())
        if not words:
            return []
        match = " OR ".join(f'"{w}"' for w in dict.fromkeys(words))
        rows = self.db.execute(
            "SELECT title, text, url FROM passages WHERE passages MATCH ? ORDER BY bm25(passages), rowid LIMIT ?",
            (match, self.k),
        ).fetchall()
        return [{"title": t, "snippet": x[: self.snippet_chars], "url": u} for t, x, u in rows]


def _get_json(url: str, params: dict[str, Any], timeout: float = 10) -> dict:
    with urllib.request.urlopen(f"{url}?{urllib.parse.urlencode(params)}", timeout=timeout) as response:
        return json.load(response)


class SerpAPISearch:
    def __init__(self, api_key: str, *, k: int = 3):
        self.api_key, self.k = api_key, k

    def search(self, query: str) -> list[Result]:
        data = _get_json("https://serpapi.com/search", {"q": query, "api_key": self.api_key, "num": self.k})
        return [
            {"title": r.get("title", ""), "snippet": r.get("snippet", ""), "url": r.get("link", "")}
            for r in data.get("organic_results", [])[: self.k]
        ]


class DuckDuckGoSearch:
    def search(self, query: str) -> list[Result]:
        data = _get_json("https://api.duckduckgo.com/", {"q": query, "format": "json", "no_html": 1})
        if data.get("AbstractText"):
            return [
                {"title": data.get("Heading", ""), "snippet": data["AbstractText"], "url": data.get("AbstractURL", "")}
            ]
        return [
            {"title": "", "snippet": r.get("Text", ""), "url": r.get("FirstURL", "")}
            for r in data.get("RelatedTopics", [])[:2]
            if isinstance(r, dict)
        ]


def make_backend(options: dict[str, Any]) -> SearchBackend:
    """The backend `options["backend"]` names (see the module's docstring), with k, snippet_chars, corpus and
    api_key (else $SERPAPI_KEY) from `options`."""
    backend, k = options.get("backend", "local"), int(options.get("k", 3))
    key = options.get("api_key") or os.environ.get("SERPAPI_KEY")
    if backend == "auto":
        backend = "serpapi" if key else "local"
    if backend == "local":
        return LocalSearch(options["corpus"], k=k, snippet_chars=int(options.get("snippet_chars", 300)))
    if backend == "serpapi":
        if not key:
            raise ValueError("deepsearchqa: the serpapi backend needs $SERPAPI_KEY or search.api_key")
        return SerpAPISearch(key, k=k)
    if backend == "duckduckgo":
        return DuckDuckGoSearch()
    module, sep, factory = backend.partition(":")
    if not sep:
        raise ValueError(
            f"deepsearchqa: unknown search backend {backend!r} (local, serpapi, duckduckgo, auto or "
            "package.module:factory)"
        )
    return getattr(importlib.import_module(module), factory)(options)
