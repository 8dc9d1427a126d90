"""Every JSON GRAFT reads is bounded (`graft.jsonio`): nesting depth, line, string and file length are
checked before the text is parsed, and a text past them is a clear error (a skipped, counted record
under --skip-bad), never a RecursionError traceback nor a line read whole into memory."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from graft import jsonio
from graft.errors import GraftError, InputValidationError
from graft.jsonio import MAX_DEPTH, JSONLimitError, check_bounds, iter_lines, loads

#: A 6 KB line nested 3,000 deep: what ended `graft build --skip-bad` with a RecursionError.
DEEP = '{"id": "deep", "title": "t", "abstract": ' + "[" * 3000 + "]" * 3000 + "}"


def good(pid: str) -> str:
    return json.dumps({"id": pid, "title": f"Paper {pid}", "abstract": "We study parsing of nested data."})


def test_depth_is_counted_outside_strings_without_recursion() -> None:
    assert len(DEEP) < 6100
    with pytest.raises(JSONLimitError, match=f"nested more than {MAX_DEPTH} levels"):
        loads(DEEP, "x.jsonl line 2")
    with pytest.raises(JSONLimitError):
        loads(DEEP.encode())  # bytes as a binary file gives them
    at_limit = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert loads(at_limit) == json.loads(at_limit)
    with pytest.raises(JSONLimitError):
        loads("[" + at_limit + "]")
    # brackets inside strings, escaped quotes included, are text: not nesting
    text = json.dumps({"a": "[" * 5000 + '\\"[{' * 100, "b": ["]]]" * 50, {"c": "{{{"}]})
    assert loads(text) == json.loads(text)
    assert loads(text.encode()) == json.loads(text)
    # a deeply nested object, or a 100,000-deep one, as fast as a flat one: no RecursionError
    with pytest.raises(JSONLimitError):
        loads('{"a":' * 100_000 + "1" + "}" * 100_000)


def test_a_string_longer_than_the_limit_is_refused() -> None:
    check_bounds('{"a": "' + "x" * 100 + '"}', max_string=100)
    with pytest.raises(JSONLimitError, match="a string of 101 bytes, longer than the 100"):
        check_bounds('{"a": "' + "x" * 101 + '"}', "f.json", max_string=100)
    # the limit holds even when the text has few brackets
    with pytest.raises(JSONLimitError):
        loads(json.dumps("y" * 200), max_string=150)


def test_lines_longer_than_the_limit_are_skipped_whole(tmp_path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b"short\n" + b"z" * 1000 + b"\nafter\n" + b"w" * 20 + b"\n" + b"last")
    with path.open("rb") as fh:
        got = list(iter_lines(fh, max_bytes=20))
    assert got == [(1, b"short\n"), (2, None), (3, b"after\n"), (4, b"w" * 20 + b"\n"), (5, b"last")]


def test_corpus_lines_past_the_limits_stop_the_load_or_are_skipped_and_counted(tmp_path, monkeypatch) -> None:
    from graphbuild.corpus import load_corpus

    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join([good("a"), DEEP, good("b"), '{"id": "long", "title": "' + "t" * 10_000 + '"}',
                               good("c")]) + "\n")
    monkeypatch.setattr(jsonio, "MAX_LINE_BYTES", 8192)
    with pytest.raises(InputValidationError, match=r"corpus.jsonl line 2: nested more than 64 levels deep.*"
                                                   r"pass --skip-bad"):
        load_corpus(path)
    corpus = load_corpus(path, skip_bad=True)
    assert corpus.papers["paper_id"].to_list() == ["a", "b", "c"]
    reasons = {bad.where: bad.reason for bad in corpus.report.skipped}
    assert set(reasons) == {"corpus.jsonl line 2", "corpus.jsonl line 4"}
    assert "nested more than 64" in reasons["corpus.jsonl line 2"]
    assert "longer than 8,192 bytes" in reasons["corpus.jsonl line 4"]
    # a corpus given as one JSON file (or a folder of them): the file is the record
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "one.json").write_text(good("one"))
    (folder / "two.json").write_text(DEEP)
    with pytest.raises(InputValidationError, match="two.json: nested more than 64"):
        load_corpus(folder)
    assert load_corpus(folder, skip_bad=True).papers["paper_id"].to_list() == ["one"]


def test_graft_build_names_the_deep_line(tmp_path) -> None:
    from typer.testing import CliRunner

    from cli.app import app

    path = tmp_path / "corpus.jsonl"
    path.write_text(good("a") + "\n" + DEEP + "\n")
    res = CliRunner().invoke(app, ["build", str(path), "--out", str(tmp_path / "idx")])
    assert res.exit_code == 2, res.output
    assert "corpus.jsonl line 2: nested more than 64 levels deep" in res.output
    assert "RecursionError" not in res.output and not (tmp_path / "idx").exists()


def test_query_records_and_query_files_are_bounded(tmp_path) -> None:
    from cli.query_cmd import _read_queries
    from graft.records import read_record

    record = tmp_path / "deep.json"
    record.write_text(DEEP)
    with pytest.raises(InputValidationError, match="deep.json: nested more than 64 levels deep"):
        read_record(record)
    queries = tmp_path / "queries.jsonl"
    queries.write_text("p1\n" + DEEP + "\n")
    with pytest.raises(GraftError, match="queries.jsonl line 2: nested more than 64 levels deep"):
        _read_queries(queries, {"p1", "deep"})
    fine = tmp_path / "fine.jsonl"
    fine.write_text('p1\n{"title": "A [bracketed] title", "abstract": "' + "[" * 500 + '"}\n')
    assert [r["id"] for r in _read_queries(fine, {"p1"})] == ["p1", "query-2"]


def test_llm_answers_and_index_files_are_bounded(tmp_path) -> None:
    from graft.errors import IndexFormatError
    from graft.manifest import read_manifest
    from graphbuild.facets_llm import parse_facet_response

    with pytest.raises(InputValidationError, match="paper p: nested more than 64"):
        parse_facet_response('{"problem": ' + "[" * 3000 + "]" * 3000 + "}", where="paper p")
    (tmp_path / "manifest.json").write_text('{"format": ' + "[" * 3000 + "]" * 3000 + "}")
    with pytest.raises(IndexFormatError, match="manifest is not valid JSON .*nested more than 64"):
        read_manifest(tmp_path)


def test_a_file_larger_than_the_limit_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"a": "x" * 100}))
    with pytest.raises(JSONLimitError, match=r"big.json: 1\d\d bytes, more than the 50"):
        jsonio.read_json_file(path, max_bytes=50)
    assert jsonio.read_json_file(path)["a"] == "x" * 100


def reference_structure(raw: bytes) -> tuple[int, int]:
    """(longest string, deepest nesting) by a plain character loop: the oracle of `_structure`."""
    longest = deepest = depth = 0
    in_string = escaped = False
    start = 0
    for i, byte in enumerate(raw):
        ch = chr(byte)
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
                longest = max(longest, i - start - 1)
        elif ch == '"':
            in_string, start = True, i
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    if in_string:
        longest = max(longest, len(raw) - start - 1)
    return longest, deepest


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(alphabet=st.sampled_from('ab"\\[]{}é\n '), max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
        st.text(alphabet=st.sampled_from('k"\\[{'), max_size=4), inner, max_size=4),
    max_leaves=30)


@given(value=json_values, cut=st.integers(0, 200))
@settings(max_examples=300, deadline=None)
def test_the_vectorised_scan_agrees_with_a_character_loop(value, cut) -> None:
    """On valid JSON (any escapes, brackets and quotes inside strings) and on the same text cut short."""
    from graft.jsonio import _structure

    for raw in (json.dumps(value, ensure_ascii=False).encode(), json.dumps(value).encode()[:cut]):
        assert _structure(np.frombuffer(raw, np.uint8)) == reference_structure(raw), raw
