"""Leak detection's edges (tasklib/leaks.py; test_canary.py has the common encodings): URL-safe base64 whose
text really holds `-` and `_` (in the item's own span, where no skipped start character can make up for a
misread one), and encodings nested up to the limit, and past it (not found, as the module says)."""

from __future__ import annotations

import base64
import gzip
import json

import pytest

import a2rl.tasklib.leaks as leaks

# "???" and "~~~" at offsets divisible by 3 encode to "Pz8/" and "fn5+": URL-safe, "Pz8_" and "fn5-"
ITEM = "What is 3 ??? 4 ~~~ and why does the river flow to the sea at night?"


@pytest.fixture
def found(tmp_path) -> leaks.HeldoutMarkers:
    heldout = tmp_path / "heldout"
    heldout.mkdir()
    (heldout / "test.jsonl").write_text(json.dumps({"prompt": ITEM}) + "\n")
    return leaks.markers(heldout)


def nest(data: bytes, *layers) -> bytes:
    """`data` encoded by each of `layers` in turn (the first innermost)."""
    for layer in layers:
        data = layer(data)
    return data


def test_url_safe_base64_with_dash_and_underscore_is_found(found, tmp_path):
    text = base64.urlsafe_b64encode(ITEM.encode()).decode().rstrip("=")
    assert "-" in text and "_" in text and "+" not in text and "/" not in text
    assert found.find(f"token={text}&next=1") == ["held-out item test.jsonl:1 (base64)"]
    assert found.find_bytes(text.encode()) == ["held-out item test.jsonl:1 (base64)"]
    model = tmp_path / "model"
    model.mkdir()
    (model / "notes.txt").write_text(text)
    assert leaks.scan_files(model, found) == ["held-out item test.jsonl:1 (base64) in notes.txt"]


def test_encodings_nested_three_deep_are_found_and_past_the_limit_are_not(found):
    assert leaks.MAX_DEPTH == 3
    b64 = base64.b64encode
    three = nest(ITEM.encode(), b64, b64, b64)
    assert found.find(three.decode()) == ["held-out item test.jsonl:1 (base64, base64, base64)"]
    assert found.find_bytes(three) == ["held-out item test.jsonl:1 (base64, base64, base64)"]
    mixed = nest(ITEM.encode(), b64, gzip.compress, b64)
    assert found.find(mixed.decode()) == ["held-out item test.jsonl:1 (base64, gzip, base64)"]
    # past the limit: not looked into (leaks.py: "nested up to MAX_DEPTH layers"), so not found
    assert found.find(nest(ITEM.encode(), b64, b64, b64, b64).decode()) == []
    assert found.find_bytes(nest(ITEM.encode(), b64, b64, b64, b64)) == []
    assert found.find(nest(ITEM.encode(), b64, b64, gzip.compress, b64).decode()) == []


def test_a_files_own_compression_is_unpacked_before_the_layers_are_counted(found):
    """A file's content is unpacked from depth 0 (`depth <= MAX_DEPTH`), text decoded below depth MAX_DEPTH
    only: so a file holds one layer more than a transcript before its content is no longer looked into."""
    assert found.find_bytes(nest(ITEM.encode(), *[gzip.compress] * 4)) == [
        "held-out item test.jsonl:1 (gzip, gzip, gzip, gzip)"
    ]
    assert found.find_bytes(nest(ITEM.encode(), *[gzip.compress] * 5)) == []
    four = nest(ITEM.encode(), gzip.compress, base64.b64encode, gzip.compress, base64.b64encode)  # innermost first
    assert found.find_bytes(four) == ["held-out item test.jsonl:1 (base64, gzip, base64, gzip)"]


def test_scan_files_looks_into_subdirectories_past_empty_files_and_never_follows_a_link(found, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text(ITEM)
    model = tmp_path / "model"
    (model / "sub").mkdir(parents=True)
    (model / "a.txt").write_bytes(b"")  # empty: skipped, and the scan goes on
    (model / "b.txt").write_text(f"x {ITEM} y")
    (model / "sub" / "c.json").write_text(json.dumps({"note": ITEM}))
    (model / "link.txt").symlink_to(outside)  # a link is not the submission's own file
    assert leaks.scan_files(model, found) == [
        "held-out item test.jsonl:1 in b.txt",
        "held-out item test.jsonl:1 in sub/c.json",
    ]


def test_normalise_undoes_string_escapes():
    assert leaks.normalise('Line ONE\\nline\\ttwo: \\"quoted\\" \\u00e9t\\u00c9 \\x41\\/b \\\\ end') == (
        "line one line two quoted été a b end"
    )


def test_a_file_past_max_text_bytes_is_searched_for_the_canary_only(tmp_path, monkeypatch):
    heldout = tmp_path / "heldout"
    heldout.mkdir()
    (heldout / "test.jsonl").write_text(json.dumps({"prompt": ITEM}) + "\n")
    (heldout / leaks.CANARY).write_text("a2rl-canary-0123456789abcdef\n")
    found = leaks.markers(heldout)
    monkeypatch.setattr(leaks, "MAX_TEXT_BYTES", 200)
    at_limit = f"{ITEM} ".ljust(200).encode()
    assert found.find_bytes(at_limit) == ["held-out item test.jsonl:1"]  # still text
    assert found.find_bytes(at_limit + b"x") == []  # weights: the item is not looked for
    assert found.find_bytes(at_limit + b"a2rl-canary-0123456789abcdef") == ["canary"]
    assert leaks.markers(tmp_path / "nowhere").find_bytes(at_limit + b"x") == []  # no canary to look for


def test_binary_files_read_as_text_and_decoded_garbage_is_dropped_past_one_bad_character_in_ten(found):
    # a file's own bytes: whatever is not UTF-8 around an item, the item is found
    assert found.find_bytes(b"\xff" * 100 + ITEM.encode()) == ["held-out item test.jsonl:1"]
    # decoded from base64: kept with one replacement character in ten (a garbled edge), dropped past that
    padded = (ITEM + "    ").encode()  # 72 characters
    assert found.find(base64.b64encode(b"\xff" * 8 + padded).decode()) == ["held-out item test.jsonl:1 (base64)"]
    assert found.find(base64.b64encode(b"\xff" * 9 + padded).decode()) == []


@pytest.mark.parametrize("pack", ["gzip", "bzip2", "xz", "zip"])
def test_each_stream_or_member_is_unpacked_up_to_max_unpacked_bytes(found, monkeypatch, pack):
    import bz2
    import io
    import lzma
    import zipfile

    def zipped(data: bytes) -> bytes:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr("notes.txt", data)
        return buf.getvalue()

    compress = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress, "zip": zipped}[pack]
    monkeypatch.setattr(leaks, "MAX_UNPACKED", 200)
    label = f"held-out item test.jsonl:1 ({pack}{' member notes.txt' if pack == 'zip' else ''}, normalised)"
    words = ITEM.rstrip("?").encode()  # ends in a word: one byte less of it is no longer the item
    assert found.find_bytes(compress(words.rjust(200))) == [label]  # it ends at the limit
    assert found.find_bytes(compress(words.rjust(201))) == []  # one byte past it


def test_an_item_mostly_punctuation_is_found_verbatim_however_encoded(tmp_path):
    short = "((( ??? ))) !!! ... --- ;;; ::: 12 ,,, ***"  # 40 characters, "12" once normalised
    heldout = tmp_path / "heldout"
    heldout.mkdir()
    (heldout / "test.jsonl").write_text(json.dumps({"prompt": short}) + "\n")
    found = leaks.markers(heldout)
    assert found.short == {short: "test.jsonl:1"} and found.normalised == {}
    assert found.find(f"log: {short}!") == ["held-out item test.jsonl:1"]
    assert found.find(base64.b64encode(short.encode()).decode()) == ["held-out item test.jsonl:1 (base64)"]
    assert found.find("((( ??? ))) !!! ... --- 12") == []  # its normalised form alone is too common to count


def test_a_long_text_is_searched_in_overlapping_rounds_of_anchors(found, monkeypatch):
    """Anchors are gathered _CHUNK characters a round (rounds overlapping by ANCHOR): an item is found whichever
    round its anchor falls in, at the edges between them too."""
    monkeypatch.setattr(leaks, "_CHUNK", 64)
    tail = " filler" * 40  # several rounds past the item
    for offset in range(0, 90):
        assert found.find("x" * offset + " " + ITEM + tail) == ["held-out item test.jsonl:1"], offset


def test_encodings_with_a_character_glued_on_are_still_read(found):
    # hex after a hex-looking letter: the run is read from its second character
    assert found.find("a" + ITEM.encode().hex()) == [
        "held-out item test.jsonl:1 (hex, normalised)"
    ]  # its last byte cut
    # base64 with one character glued after it: that character alone cannot end a group of three bytes
    words = b"  " + ITEM.rstrip("?").encode()  # 69 bytes, ending in a word: one byte less is not the item
    glued = base64.b64encode(words).decode().rstrip("=") + "Q"
    assert len(glued) % 4 == 1
    assert found.find(glued) == ["held-out item test.jsonl:1 (base64, normalised)"]


def test_no_heldout_split_finds_nothing(tmp_path):
    nothing = leaks.markers(tmp_path / "nowhere")
    assert nothing.find(ITEM) == [] and nothing.find_bytes(ITEM.encode()) == []


def test_items_come_from_jsonl_lines_and_json_lists_and_objects(tmp_path):
    heldout = tmp_path / "heldout"
    (heldout / "sub").mkdir(parents=True)
    long = [f"Item number {n} is a held-out question long enough to count as one." for n in range(6)]
    (heldout / "test.jsonl").write_text(
        "\n".join([json.dumps({"q": long[0]}), "", "not json", json.dumps([{"deep": [long[1]]}, "short"])]) + "\n"
    )
    (heldout / "sub" / "list.json").write_text(json.dumps(["tiny", {"a": long[2]}]))
    (heldout / "obj.json").write_text(json.dumps({"k1": f"  {long[3]}  ", "k2": [long[4], 7, None]}))
    (heldout / "scalar.json").write_text(json.dumps(long[5]))
    (heldout / "notes.txt").write_text(long[0])  # neither JSONL nor JSON: not an item source
    found = leaks.markers(heldout)
    assert {label: forms[0] for label, forms in found.verbatim.items()} == {
        "obj.json:k1": long[3],  # stripped
        "obj.json:k2": long[4],
        "scalar.json": long[5],
        "sub/list.json:2": long[2],
        "test.jsonl:1": long[0],
        "test.jsonl:4": long[1],  # blank and non-JSON lines still count
    }
    assert found.find(f"x {long[3]} y") == ["held-out item obj.json:k1"]
