"""What a run records about its agent, outside the agent's reach: token use and cost from its transcript, and
its code at every submission.

    blobs/<sha[:2]>/<sha256>          file contents, shared by every snapshot of every run (deduplicated)
    runs/<id>/snapshots/NNN.json      CodeSnapshot of code/ when submission NNN (its seq) was made
    runs/<id>/snapshots/NNN.diff      unified diff against the run's previous snapshot

Transcripts: each stack names a parser (`transcript:` in its YAML) for the CLI's machine-readable output, which
the run keeps in runs/<id>/agent.log (mixed with the run's own `[a2rl ...]` lines and stderr: anything that is
not a JSON object is ignored). Numbers a CLI does not report stay None; no pricing table is guessed.
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator

from pydantic import BaseModel

from a2rl.records import Record, atomic_write_text, now, sha256_file
from a2rl.sweep import RecordingSettings

MB = 1 << 20


# ------------------------------------------------------------------------------------------------ transcripts
class AgentUsage(BaseModel):
    """Totals over the run's transcript. input_tokens counts every prompt token, cached ones included."""
    parser: str
    calls: int = 0  # transcript records the totals came from (results, turns, steps)
    input_tokens: int | None = None
    cached_input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None


def json_objects(text: str) -> Iterator[dict[str, Any]]:
    """JSON objects that start a line (one-line JSONL events or a pretty-printed document)."""
    decoder, pos = json.JSONDecoder(), 0
    while (start := text.find("{", pos)) >= 0:
        if text[text.rfind("\n", 0, start) + 1:start].strip():
            pos = start + 1
            continue
        try:
            obj, pos = decoder.raw_decode(text, start)
        except ValueError:
            pos = start + 1
            continue
        if isinstance(obj, dict):
            yield obj


def _n(d: Any, *keys: str) -> int:
    return sum(int(d.get(k) or 0) for k in keys) if isinstance(d, dict) else 0


Counts = tuple[int, int, int, float | None]  # input (all), cached, output, cost


def _claude(o: dict) -> Counts | None:
    # `claude -p --output-format stream-json`: one {"type": "result", "usage": {...}, "total_cost_usd"} per session
    if o.get("type") != "result":
        return None
    u = o.get("usage") or {}
    return (_n(u, "input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"),
            _n(u, "cache_read_input_tokens"), _n(u, "output_tokens"), o.get("total_cost_usd"))


def _codex(o: dict) -> Counts | None:
    # `codex exec --json`: {"type": "turn.completed", "usage": {input_tokens, cached_input_tokens, output_tokens}}
    if o.get("type") != "turn.completed":
        return None
    u = o.get("usage") or {}
    return _n(u, "input_tokens"), _n(u, "cached_input_tokens"), _n(u, "output_tokens"), None


def _gemini(o: dict) -> Counts | None:
    # `gemini -p --output-format json`: {"response", "stats": {"models": {<model>: {"tokens": {prompt, cached,
    # candidates, ...}}}}}
    models = (o.get("stats") or {}).get("models")
    if not isinstance(models, dict):
        return None
    toks = [m.get("tokens") or {} for m in models.values() if isinstance(m, dict)]
    return (sum(_n(t, "prompt") for t in toks), sum(_n(t, "cached") for t in toks),
            sum(_n(t, "candidates", "thoughts") for t in toks), None)


def _opencode(o: dict) -> Counts | None:
    # `opencode run --format json`: {"type": "step_finish", "part": {"tokens": {input, output, reasoning,
    # cache: {read, write}}, "cost"}} per model step
    if o.get("type") != "step_finish":
        return None
    part = o.get("part") or {}
    t = part.get("tokens") or {}
    cache = t.get("cache") or {}
    return (_n(t, "input") + _n(cache, "read", "write"), _n(cache, "read"), _n(t, "output", "reasoning"),
            part.get("cost"))


def _litellm(o: dict) -> Counts | None:
    # OpenAI-style completion records as litellm logs them (RD-Agent): {"usage": {prompt_tokens,
    # completion_tokens, prompt_tokens_details: {cached_tokens}}, "response_cost"}
    u = o.get("usage")
    if not isinstance(u, dict) or "prompt_tokens" not in u:
        return None
    return (_n(u, "prompt_tokens"), _n(u.get("prompt_tokens_details"), "cached_tokens"), _n(u, "completion_tokens"),
            o.get("response_cost"))


def _openhands(objs: list[dict]) -> AgentUsage:
    # OpenHands reports running totals ({"metrics": {"accumulated_cost", "accumulated_token_usage":
    # {prompt_tokens, completion_tokens, cache_read_tokens}}}): the last one is the run's
    last = None
    for o in objs:
        m = o.get("metrics", o)
        if isinstance(m, dict) and "accumulated_cost" in m:
            last = m
    if last is None:
        return AgentUsage(parser="openhands")
    u = last.get("accumulated_token_usage") or {}
    return AgentUsage(parser="openhands", calls=1, input_tokens=_n(u, "prompt_tokens"),
                      cached_input_tokens=_n(u, "cache_read_tokens"), output_tokens=_n(u, "completion_tokens"),
                      cost_usd=last.get("accumulated_cost"))


_SUMMED: dict[str, Callable[[dict], Counts | None]] = {
    "claude": _claude, "codex": _codex, "gemini": _gemini, "opencode": _opencode, "litellm": _litellm}


def parse_usage(parser: str, transcript: str) -> AgentUsage | None:
    """Token and cost totals of a transcript; None for stacks without a parser."""
    if parser == "none":
        return None
    objs = list(json_objects(transcript))
    if parser == "openhands":
        return _openhands(objs)
    counts = [c for c in map(_SUMMED[parser], objs) if c is not None]
    if not counts:
        return AgentUsage(parser=parser)
    costs = [c[3] for c in counts if c[3] is not None]
    return AgentUsage(parser=parser, calls=len(counts), input_tokens=sum(c[0] for c in counts),
                      cached_input_tokens=sum(c[1] for c in counts), output_tokens=sum(c[2] for c in counts),
                      cost_usd=round(sum(costs), 6) if costs else None)


# ------------------------------------------------------------------------------------------------ snapshots
class SnapshotFile(BaseModel):
    path: str  # relative to code/
    sha256: str
    size: int


class SkippedFile(BaseModel):
    path: str
    size: int
    reason: str  # "over <cap>" (max_file_mb, max_total_mb, workspace_max_*), "symlink", "unreadable"


class CodeSnapshot(Record):
    run_id: str
    submission_id: str
    seq: int
    taken_at: float
    files: list[SnapshotFile]
    skipped: list[SkippedFile]
    total_bytes: int
    previous_seq: int | None  # the snapshot the diff is against
    added: list[str]
    modified: list[str]
    removed: list[str]


def blob_path(sweep_root: Path, sha: str) -> Path:
    return sweep_root / "blobs" / sha[:2] / sha


def snapshot_dir(sweep_root: Path, run_id: str) -> Path:
    return sweep_root / "runs" / run_id / "snapshots"


def load_snapshots(sweep_root: Path, run_id: str) -> list[CodeSnapshot]:
    return [CodeSnapshot.load(p) for p in sorted(snapshot_dir(sweep_root, run_id).glob("[0-9]*.json"))]


def _walk(root: Path, exclude: list[str], max_file_mb: float, max_total_mb: float, caps: tuple[str, str],
          skip_top: frozenset[str] = frozenset()) -> tuple[list[tuple[str, Path, int]], list[SkippedFile]]:
    """Files under root to keep, in path order, within the caps (`caps` names them in skip reasons)."""
    excluded = lambda name: any(fnmatch.fnmatch(name, g) for g in exclude)  # noqa: E731
    keep, skipped, total = [], [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        top = Path(dirpath) == root
        dirnames[:] = sorted(d for d in dirnames if not excluded(d) and not (top and d in skip_top))
        for name in sorted(filenames):
            full = Path(dirpath) / name
            rel = str(full.relative_to(root))
            if excluded(name) or (top and name in skip_top):
                continue
            if full.is_symlink():  # could point anywhere (the base model, outside the workspace)
                skipped.append(SkippedFile(path=rel, size=0, reason="symlink"))
                continue
            try:
                size = full.stat().st_size
            except OSError:
                skipped.append(SkippedFile(path=rel, size=0, reason="unreadable"))
                continue
            if size > max_file_mb * MB:
                skipped.append(SkippedFile(path=rel, size=size, reason=f"over {caps[0]}"))
            elif total + size > max_total_mb * MB:
                skipped.append(SkippedFile(path=rel, size=size, reason=f"over {caps[1]}"))
            else:
                keep.append((rel, full, size))
                total += size
    return keep, skipped


def _store_blob(sweep_root: Path, data: bytes) -> str:
    sha = hashlib.sha256(data).hexdigest()
    dest = blob_path(sweep_root, sha)
    if not dest.exists():
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".blob.")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, dest)  # same content under the same name: a concurrent writer's copy is as good
    return sha


def _lines(sweep_root: Path, sha: str | None) -> list[str] | None:
    """A blob's text lines; None when it is not text."""
    if sha is None:
        return []
    try:
        return blob_path(sweep_root, sha).read_bytes().decode("utf-8").splitlines(keepends=True)
    except UnicodeDecodeError:
        return None


def unified_diff(sweep_root: Path, before: dict[str, str], after: dict[str, str]) -> str:
    """Diff of two {path: sha} trees, file by file in path order."""
    out = []
    for path in sorted(set(before) | set(after)):
        a, b = before.get(path), after.get(path)
        if a == b:
            continue
        la, lb = _lines(sweep_root, a), _lines(sweep_root, b)
        if la is None or lb is None:
            out.append(f"Binary file {path} differs\n")
            continue
        diff = list(difflib.unified_diff(la, lb, "/dev/null" if a is None else f"a/{path}",
                                         "/dev/null" if b is None else f"b/{path}"))
        out += [line if line.endswith("\n") else line + "\n\\ No newline at end of file\n" for line in diff]
    return "".join(out)


def snapshot_code(sweep_root: Path, run_id: str, code: Path, *, submission_id: str, seq: int,
                  settings: RecordingSettings) -> CodeSnapshot:
    """Record code/ as it is at submission `seq`, and its diff to the run's previous snapshot."""
    keep, skipped = _walk(code, settings.exclude, settings.max_file_mb, settings.max_total_mb,
                          ("max_file_mb", "max_total_mb"))
    files = []
    for rel, full, size in keep:
        try:
            data = full.read_bytes()
        except OSError:  # removed or made unreadable by the agent meanwhile
            skipped.append(SkippedFile(path=rel, size=size, reason="unreadable"))
            continue
        files.append(SnapshotFile(path=rel, sha256=_store_blob(sweep_root, data), size=len(data)))
    prev = [s for s in load_snapshots(sweep_root, run_id) if s.seq < seq]
    before = {f.path: f.sha256 for f in prev[-1].files} if prev else {}
    after = {f.path: f.sha256 for f in files}
    snap = CodeSnapshot(run_id=run_id, submission_id=submission_id, seq=seq, taken_at=now(), files=files,
                        skipped=skipped, total_bytes=sum(f.size for f in files),
                        previous_seq=prev[-1].seq if prev else None,
                        added=sorted(set(after) - set(before)), removed=sorted(set(before) - set(after)),
                        modified=sorted(p for p in set(after) & set(before) if after[p] != before[p]))
    d = snapshot_dir(sweep_root, run_id)
    atomic_write_text(d / f"{seq:03d}.diff", unified_diff(sweep_root, before, after))
    snap.dump(d / f"{seq:03d}.json")
    return snap


def snapshot_text(sweep_root: Path, snap: CodeSnapshot) -> Iterator[tuple[str, str]]:
    """(path, text) of a snapshot's text files."""
    for f in snap.files:
        lines = _lines(sweep_root, f.sha256)
        if lines is not None:
            yield f.path, "".join(lines)


# ------------------------------------------------------------------------------------------------ workspaces
WORKSPACE_SKIP = frozenset({"data", "models", "home", "tmp"})  # copies of inputs, links, caches


class WorkspaceArchive(Record):
    """runs/<id>/workspace/manifest.json: what of the agent's workspace was kept after the run."""
    run_id: str
    source: str  # the workspace on scratch
    archived_at: float
    files: list[SnapshotFile]
    skipped: list[SkippedFile]
    total_bytes: int


def archive_workspace(ws_root: Path, dest: Path, run_id: str, settings: RecordingSettings) -> WorkspaceArchive:
    """Copy what the agent left (code/, output/ without weights, its top-level files) to `dest` in the sweep
    directory, so it stays browsable when scratch is node-local; within the recording caps. Replaces an
    earlier archive of the run (a resumed run's is newer)."""
    keep, skipped = _walk(ws_root, settings.exclude, settings.workspace_max_file_mb, settings.workspace_max_mb,
                          ("workspace_max_file_mb", "workspace_max_mb"), WORKSPACE_SKIP)
    tmp = dest.with_name(f".{dest.name}.partial")
    shutil.rmtree(tmp, ignore_errors=True)
    files = []
    for rel, full, size in keep:
        target = tmp / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            shutil.copyfile(full, target)
        except OSError:
            skipped.append(SkippedFile(path=rel, size=size, reason="unreadable"))
            continue
        files.append(SnapshotFile(path=rel, sha256=sha256_file(target), size=target.stat().st_size))
    archive = WorkspaceArchive(run_id=run_id, source=str(ws_root), archived_at=now(), files=files, skipped=skipped,
                               total_bytes=sum(f.size for f in files))
    archive.dump(tmp / "manifest.json")
    shutil.rmtree(dest, ignore_errors=True)
    os.replace(tmp, dest)
    return archive
