"""What an agent may submit (run/artifacts.py), rule by rule, on small directories: the path's checks, the sweep's
limits at their edges, what is kept and frozen, and each refusal's message (test_submissions.py goes through the
grader; test_freeze_race.py drives the race defence)."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from a2rl.recording import nofollow
from a2rl.run.artifacts import (
    MAX_PATH,
    ArtifactError,
    Limits,
    MalformedPath,
    check_artifact,
    check_content,
    check_model_path,
    freeze,
    resolve_submission,
)
from test_freeze_race import swap_after_lstat
from test_hostile_files import safetensors

GIB = 1 << 30
WEIGHTS = safetensors(b"own-")
LIMITS = Limits(max_files=8, max_file_bytes=1 << 20, max_total_bytes=1 << 21)


def model(d: Path, **files: bytes | str) -> Path:
    """A directory holding `files` (name__ext for name.ext), by default a minimal valid model."""
    d.mkdir(parents=True)
    defaults = {"model.safetensors": WEIGHTS, "config.json": json.dumps({"model_type": "llama"})}
    for name, content in {**defaults, **{k.replace("__", "."): v for k, v in files.items()}}.items():
        if content is not None:
            (d / name).write_bytes(content.encode() if isinstance(content, str) else content)
    return d


@pytest.fixture
def ws(tmp_path) -> Path:
    (tmp_path / "ws" / "output").mkdir(parents=True)
    return tmp_path / "ws"


def refused(d: Path, output: Path, limits: Limits = LIMITS) -> str:
    with pytest.raises(ArtifactError) as e:
        check_artifact(d, output, limits).close()
    return str(e.value)


def test_limits_default_to_three_times_the_base_weights_and_at_least_a_gib(tmp_path):
    base = tmp_path / "base"
    base.mkdir()
    with open(base / "model.safetensors", "wb") as f:
        f.truncate(GIB // 2 + 1)  # sparse: its apparent size counts
    with open(base / "pytorch_model.bin", "wb") as f:
        f.truncate(10 * GIB)  # not weights the grader loads
    unset = SimpleNamespace(max_files=5, max_file_gb=None, max_total_gb=None)
    assert Limits.for_base(unset, base) == Limits(5, 3 * (GIB // 2 + 1), 3 * (GIB // 2 + 1))
    small = tmp_path / "small"
    small.mkdir()
    (small / "model.safetensors").write_bytes(WEIGHTS)
    assert Limits.for_base(unset, small) == Limits(5, GIB, GIB)
    capped = SimpleNamespace(max_files=7, max_file_gb=0.25, max_total_gb=2)
    assert Limits.for_base(capped, small) == Limits(7, GIB // 4, 2 * GIB)
    total_only = SimpleNamespace(max_files=7, max_file_gb=None, max_total_gb=1.5)
    assert Limits.for_base(total_only, small) == Limits(7, GIB * 3 // 2, GIB * 3 // 2)  # a file may fill it


def test_model_path_lengths_at_their_limits():
    longest = ("a" * 255 + "/") * (MAX_PATH // 256)  # MAX_PATH characters, 255 per name
    assert len(longest) == MAX_PATH
    for fine in (longest, None, 7):
        check_model_path(fine)
    for bad in (longest + "a", "x/" + "c" * 256, "m\0odel"):
        with pytest.raises(MalformedPath, match=f"^model_path is not a usable path .* longer than {MAX_PATH} "):
            check_model_path(bad)
    assert MAX_PATH == 4096


def test_resolve_submission(ws, tmp_path):
    m = model(ws / "output" / "m")
    assert resolve_submission("output/m", ws) == m.resolve()
    assert resolve_submission(str(m), ws) == m.resolve()
    assert resolve_submission("output", ws) == (ws / "output").resolve()  # output/ itself
    for blank in (None, "", "  "):
        with pytest.raises(ArtifactError, match="^model_path is required: the directory under \\$OUTPUT_DIR"):
            resolve_submission(blank, ws)
    with pytest.raises(ArtifactError, match="^model_path 'output/../..' resolves to .*, outside the run's output"):
        resolve_submission("output/../..", ws)
    (ws / "output2").mkdir()  # a sibling whose name starts like output/: still outside
    with pytest.raises(ArtifactError, match="outside the run's output directory"):
        resolve_submission("output2", ws)
    with pytest.raises(ArtifactError, match="^model_path 'output/nope' does not exist$"):
        resolve_submission("output/nope", ws)
    (ws / "output" / "f").write_text("x")
    with pytest.raises(ArtifactError, match="^model_path 'output/f' is not a directory$"):
        resolve_submission("output/f", ws)
    (ws / "output" / "loop").symlink_to(ws / "output" / "loop")
    with pytest.raises(ArtifactError, match="^model_path 'output/loop' does not resolve: "):
        resolve_submission("output/loop", ws)
    with pytest.raises(MalformedPath):
        resolve_submission("a\0b", ws)


def test_what_is_kept_and_frozen_exactly(ws, tmp_path):
    out = ws / "output"
    m = model(
        out / "m",
        tokenizer__json="{}",
        tokenizer__model=b"\x00sp",
        merges__txt="a b",
        chat_template__jinja="{{ x }}",
        vocab__tiktoken="t",
        optimizer__pt=b"state",
        notes__md="# mine",
    )
    (m / "checkpoint-5").mkdir()  # a directory: not a file, never opened
    os.mkfifo(m / "pipe")  # never opened (it would block)
    (out / "shared.json").write_text('{"shared": 1}')
    (m / "linked.json").symlink_to(out / "shared.json")  # a link inside output/ is followed
    (m / "gone.json").symlink_to(out / "nothing")  # dangling: skipped
    with check_artifact(m, out, Limits(16, 1 << 20, 1 << 21)) as artifact:
        assert artifact.name == "m"
        kept = [
            "chat_template.jinja",
            "config.json",
            "linked.json",
            "merges.txt",
            "model.safetensors",
            "tokenizer.json",
            "tokenizer.model",
            "vocab.tiktoken",
        ]
        assert artifact.kept == kept
        assert sorted(artifact.files) == sorted([*kept, "notes.md", "optimizer.pt"])
        assert artifact.sizes["model.safetensors"] == len(WEIGHTS) and artifact.sizes["linked.json"] == 13
        dest = freeze(artifact, tmp_path / "subs" / "s1")
    assert dest == tmp_path / "subs" / "s1" and sorted(p.name for p in dest.iterdir()) == kept
    for name in kept:
        want = (out / "shared.json") if name == "linked.json" else (m / name)
        assert (dest / name).read_bytes() == want.read_bytes() and not (dest / name).is_symlink()
    assert not (tmp_path / "subs" / "s1.partial").exists()
    assert all(f.closed for f in artifact.files.values())  # closed by `with`


def test_a_stale_partial_copy_is_replaced(ws, tmp_path):
    m = model(ws / "output" / "m")
    stale = tmp_path / "subs" / "s1.partial"
    stale.mkdir(parents=True)
    (stale / "junk").write_text("x")
    with check_artifact(m, ws / "output", LIMITS) as artifact:
        dest = freeze(artifact, tmp_path / "subs" / "s1")
    assert sorted(p.name for p in dest.iterdir()) == ["config.json", "model.safetensors"] and not stale.exists()


def test_the_file_count_limit_at_its_edge(ws):
    out = ws / "output"
    limits = Limits(max_files=4, max_file_bytes=1 << 20, max_total_bytes=1 << 21)
    m = model(out / "m", a__txt="a", b__txt="b")  # 4 entries
    check_artifact(m, out, limits).close()
    (m / "c.txt").write_text("c")
    assert refused(m, out, limits) == (
        "m/ holds more than 4 entries: submit only the model files (weights, config, tokenizer)"
    )


def test_size_limits_at_their_edges(ws):
    out = ws / "output"
    m = model(out / "m", config__json=json.dumps({"model_type": "llama", "pad": "x" * 200}))
    size = len(WEIGHTS)
    config = (m / "config.json").stat().st_size
    assert config > size  # the largest file is the config
    check_artifact(m, out, Limits(8, config, size + config)).close()
    assert refused(m, out, Limits(8, config - 1, 1 << 30)) == (
        "config.json is 0.00 GiB, over the limit of 0.00 GiB per file"
    )
    assert refused(m, out, Limits(8, 1 << 30, size + config - 1)) == "m/ holds 0.00 GiB, over the limit of 0.00 GiB"
    big = model(out / "big")
    with open(big / "model.safetensors", "r+b") as f:
        f.truncate(3 * GIB)  # sparse: apparent size counts
    assert refused(big, out, Limits(8, 2 * GIB, 8 * GIB)) == (
        "model.safetensors is 3.00 GiB, over the limit of 2.00 GiB per file"
    )
    assert refused(big, out, Limits(8, 4 * GIB, GIB + GIB // 2)) == "big/ holds 3.00 GiB, over the limit of 1.50 GiB"


def test_each_refusal_says_what_to_do(ws):
    out = ws / "output"
    (out / "empty").mkdir()
    assert refused(out / "empty", out).startswith("empty/ is empty: save the model with model.save_pretrained(dir)")
    lora = (
        "this is a LoRA/PEFT adapter, not a full model: merge it first "
        "(model = model.merge_and_unload(); model.save_pretrained(dir)) and submit that"
    )
    assert refused(model(out / "a1", adapter_config__json="{}"), out) == lora
    assert refused(model(out / "a2", adapter_model__safetensors=WEIGHTS), out) == lora
    pickles = (
        "only pickle checkpoints (.bin/.pt) found; they are never loaded: save with "
        "model.save_pretrained(dir, safe_serialization=True) to write .safetensors"
    )
    assert refused(model(out / "pkl", model__safetensors=None, pytorch_model__bin=b"x"), out) == pickles
    assert refused(model(out / "pt", model__safetensors=None, model__pth=b"x"), out) == pickles
    assert refused(model(out / "none", model__safetensors=None, notes__txt="x"), out) == (
        "no *.safetensors weights in none/ (found: config.json, notes.txt)"
    )
    assert refused(model(out / "nocfg", config__json=None), out) == (
        "config.json is missing: save with model.save_pretrained(dir)"
    )
    assert refused(model(out / "badcfg", config__json="{"), out).startswith("config.json is not valid JSON: ")
    assert refused(model(out / "listcfg", config__json="[]"), out) == "config.json must hold a JSON object"
    assert refused(model(out / "remote", config__json='{"auto_map": {}}'), out).startswith(
        "config.json has auto_map (custom model code): models are loaded without trust_remote_code"
    )
    assert "safetensors" in refused(model(out / "torn", model__safetensors=b"\x10" + b"\x00" * 7 + b"{"), out)


def test_a_directory_outside_output_or_a_link_out_of_it_is_refused(ws, tmp_path):
    out = ws / "output"
    elsewhere = model(tmp_path / "elsewhere")
    assert refused(elsewhere, out) == f"{elsewhere} is outside the run's output directory {out}: refused"
    m = model(out / "m", model__safetensors=None)
    (m / "model.safetensors").symlink_to(elsewhere / "model.safetensors")
    assert refused(m, out) == (
        f"model.safetensors is a symlink to {elsewhere / 'model.safetensors'}, outside the output directory: refused"
    )
    (out / "esc").symlink_to(elsewhere)
    assert "outside the run's output directory" in refused(out / "esc", out)


def test_a_link_inside_output_whose_target_is_swapped_for_a_link_is_refused(ws, tmp_path, monkeypatch):
    """The link m/config.json -> ../shared/cfg.json stays inside output/, so its target is opened from output/'s
    descriptor; swapped for a link out of the tree after its check, that open refuses it (never followed)."""
    out = ws / "output"
    hidden = model(tmp_path / "hidden", config__json=json.dumps({"model_type": "llama", "who": "hidden"}))
    (out / "shared").mkdir()
    (out / "shared" / "cfg.json").write_text(json.dumps({"model_type": "llama"}))
    m = model(out / "m", config__json=None)
    (m / "config.json").symlink_to(out / "shared" / "cfg.json")
    fired = swap_after_lstat(monkeypatch, out / "shared", "cfg.json", hidden / "config.json")
    assert refused(m, out) == "config.json changed while it was submitted (a symlink swapped in): refused"
    assert fired == ["cfg.json"]


def test_a_link_inside_output_through_a_directory_swapped_for_a_link_is_refused(ws, tmp_path, monkeypatch):
    out = ws / "output"
    model(tmp_path / "hidden")
    (out / "shared").mkdir()
    (out / "shared" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    m = model(out / "m", config__json=None)
    (m / "config.json").symlink_to(out / "shared" / "config.json")
    real_open_dir = nofollow.open_dir

    def open_dir(parts, at):
        if list(parts) == ["shared"]:  # after the path check: shared/ becomes a link out of the tree
            os.rename(out / "shared", tmp_path / "was-shared")
            (out / "shared").symlink_to(tmp_path / "hidden")
        return real_open_dir(parts, at)

    monkeypatch.setattr(nofollow, "open_dir", open_dir)
    assert refused(m, out) == "config.json changed while it was submitted (a symlink swapped in): refused"


def test_the_submitted_directory_swapped_for_a_link_after_its_check_is_refused(ws, tmp_path, monkeypatch):
    out = ws / "output"
    m = model(out / "m")
    hidden = model(tmp_path / "hidden")
    real_open_last = nofollow.open_last

    def open_last(path):
        os.rename(m, tmp_path / "was-m")
        m.symlink_to(hidden)
        return real_open_last(path)

    monkeypatch.setattr(nofollow, "open_last", open_last)
    assert refused(m, out) == "m/ changed while it was submitted (a symlink swapped in): refused"


def test_a_refusal_is_not_masked_by_a_failed_cleanup(ws, tmp_path, monkeypatch):
    """The copy refused (a file shrank since its check) and its partial copy will not go: the refusal is what
    the caller sees, never the clean-up's error."""
    out = ws / "output"
    m = model(out / "m")
    real_rmdir = os.rmdir

    def rmdir(path, *args, **kwargs):
        if ".partial" in str(path):  # the partial copy, renamed to trash before removal
            raise OSError(errno.EIO, "Input/output error", str(path))
        return real_rmdir(path, *args, **kwargs)

    with check_artifact(m, out, LIMITS) as artifact:
        os.truncate(m / "model.safetensors", 10)
        monkeypatch.setattr(os, "rmdir", rmdir)
        with pytest.raises(ArtifactError, match="^model.safetensors shrank from "):
            freeze(artifact, tmp_path / "subs" / "s1")
    assert not (tmp_path / "subs" / "s1").exists()
    # what could not be removed is trash (recording/frozencopies.py), never a partial copy that looks whole
    assert [p.name.endswith(".deleting") for p in (tmp_path / "subs").iterdir()] == [True]


def test_content_is_read_only_up_to_the_checked_sizes():
    """What an agent appends to a file after its check is never read: config.json as checked is valid."""
    import io

    config = b'{"model_type": "llama"}'
    files = {"config.json": io.BytesIO(config + b" appended later, not JSON"), "model.safetensors": io.BytesIO(WEIGHTS)}
    check_content(files, {"config.json": len(config), "model.safetensors": len(WEIGHTS)})
    with pytest.raises(ArtifactError, match="^config.json is not valid JSON"):
        check_content(files, {"config.json": len(config) + 4, "model.safetensors": len(WEIGHTS)})


def test_a_huge_directory_costs_max_files_plus_one_entries(ws, monkeypatch):
    out = ws / "output"
    m = model(out / "m", **{f"f{i}__txt": "x" for i in range(40)})
    real_scandir, taken = os.scandir, []

    class Counting:
        def __init__(self, it):
            self.it = it

        def __enter__(self):
            self.it.__enter__()
            return self

        def __exit__(self, *exc):
            return self.it.__exit__(*exc)

        def __iter__(self):
            return self

        def __next__(self):
            entry = next(self.it)
            taken.append(entry.name)
            return entry

    monkeypatch.setattr(os, "scandir", lambda fd: Counting(real_scandir(fd)))
    assert refused(m, out, Limits(4, 1 << 20, 1 << 21)).startswith("m/ holds more than 4 entries")
    assert len(taken) == 5  # never the 42 it holds


def test_a_directory_gone_or_looping_when_checked_is_refused_in_one_line(ws, tmp_path, monkeypatch):
    out = ws / "output"
    (out / "loop").symlink_to(out / "loop")
    assert refused(out / "loop", out) == "loop/ changed while it was submitted (a symlink swapped in): refused"
    m = model(out / "m")
    real_open_last = nofollow.open_last

    def open_last(path):
        os.rename(m, tmp_path / "was-m")  # removed after its path was checked
        return real_open_last(path)

    monkeypatch.setattr(nofollow, "open_last", open_last)
    assert refused(m, out) == "m/ could not be read: No such file or directory"
