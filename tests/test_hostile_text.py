"""Hostile text everywhere: titles, abstracts, ids, authors and topics holding rich markup, control
characters, braces, backslashes, quotes, HTML and very long strings go through build, query (table
and --json), info, export (GraphML, GEXF, JSON parsed back with networkx) and survey (Markdown
parsed, references.bib parsed back with pybtex) without a crash, a raw control character on the
terminal, or an output file that does not parse."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from cli.app import app

runner = CliRunner()

#: What must never reach the terminal: NUL, ESC (colour codes), other C0/C1 controls but newline and
#: tab, and the bidirectional overrides.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")

PIECES = ["[/b]", "[red]", "[/]", "[bold magenta]x[/bold magenta]", "\x00", "\x1b[31m", "\x1b]0;title\x07", "\r",
          "\u202e", "{", "}", "\\", "\\{", '"', "'", "<script>alert(1)</script>", "</data>", "&amp;", "%", "#",
          "_", "$x^2$", ":smile:", "`", "*", "@article{x,", "~", "\n", "\t", "]]>", "<!--", "x" * 3000]


def hostile(min_size: int = 0) -> st.SearchStrategy[str]:
    return st.lists(st.sampled_from(PIECES) | st.text(max_size=6), min_size=min_size, max_size=5).map("".join)


def hostile_id() -> st.SearchStrategy[str]:
    word = st.sampled_from(["[/b]", "[red]", "{", "}", "\\", '"', "<b>", "&", ":x:", "'", "%", "é", "#"])
    return st.lists(word, min_size=1, max_size=4).map(lambda parts: "h" + "".join(parts))


def base_records() -> list[dict[str, Any]]:
    from graphbuild.corpus import load_corpus

    papers = load_corpus(None, limit=10).papers
    return [{"id": r["paper_id"], "title": r["title"], "abstract": r["abstract"], "year": r["year"],
             "authors": r["authors"]} for r in papers.iter_rows(named=True)]


@pytest.fixture(scope="module")
def base_index(tmp_path_factory, encoder) -> Path:
    """An index of the plain papers: each example's build copies their facets and vectors from it."""
    from graphbuild.build import BuildConfig, build_index

    folder = tmp_path_factory.mktemp("hostile-base")
    path = folder / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in base_records()), encoding="utf-8")
    build_index(path, folder / "idx", BuildConfig(), encoder=encoder)
    return folder / "idx"


def no_raw_control(text: str) -> None:
    found = RAW_CONTROL.search(text)
    assert found is None, f"raw control character {found.group()!r} printed: {text[max(0, found.start() - 60):found.end() + 20]!r}"


def test_markup_in_messages_and_data_is_printed_as_text(base_index, tmp_path) -> None:
    """`[/x]` in a topic or an id, a corpus file named `nope[red].jsonl`, a title with NUL and ESC:
    a MarkupError traceback (or the wrong file named, or the raw bytes on the terminal) before."""
    res = runner.invoke(app, ["build", str(tmp_path / "nope[red].jsonl"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2 and "nope[red].jsonl" in res.output, res.output
    res = runner.invoke(app, ["query", str(base_index), "--paper", "[/b]"])
    assert res.exit_code == 2 and "paper '[/b]' is not in index" in res.output, res.output
    res = runner.invoke(app, ["survey", str(base_index), "qqq [/x] zzz", "--out", str(tmp_path / "s")])
    assert res.exit_code == 2 and "qqq [/x] zzz" in res.output, res.output
    assert not isinstance(res.exception, Exception) or isinstance(res.exception, SystemExit)
    res = runner.invoke(app, ["query", str(base_index), "--text", "Bad \x1b[31mred\x00 [/b] title. About NER."])
    assert res.exit_code == 0, res.output
    no_raw_control(res.output)


def test_hostile_text_everywhere(base_index, encoder, tmp_path_factory, monkeypatch) -> None:
    import networkx as nx
    from bib_check import assert_formats_in_plain_style
    from markdown_it import MarkdownIt
    from pybtex.database import parse_string

    import cli.survey_cmd as survey_cmd
    from graphbuild.build import BuildConfig, build_index

    tools = survey_cmd.survey_tools
    monkeypatch.setattr(survey_cmd, "survey_tools", lambda idx, enc=None, *a: tools(idx, encoder, *a))
    base = base_records()
    surveys_written = []

    @settings(max_examples=5, deadline=None, derandomize=True, phases=[Phase.explicit, Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(title=hostile(), abstract=hostile(), pid=hostile_id(), authors=st.lists(hostile(1), max_size=3),
           topic=hostile(), venue=hostile())
    def check(title: str, abstract: str, pid: str, authors: list[str], topic: str, venue: str) -> None:
        folder = tmp_path_factory.mktemp("hostile")
        records = [*base,
                   {"id": pid, "title": f"Named entity recognition {title}", "abstract":
                    f"We study named entity recognition for code. {abstract} Our tagger improves F1.",
                    "authors": authors, "venue": venue or None, "year": 2020},
                   {"id": pid + "2", "title": f"{title} {{unbalanced", "abstract": f"Entity tagging {abstract}",
                    "references": [pid]}]
        titles = {r["id"]: r["title"].strip() for r in records}
        corpus = folder / "corpus.jsonl"
        corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        idx = folder / "idx"
        build_index(corpus, idx, BuildConfig(), encoder=encoder, cache_from=base_index)

        res = runner.invoke(app, ["query", str(idx), f"--paper={pid}"])
        assert res.exit_code == 0, res.output
        no_raw_control(res.output)
        res = runner.invoke(app, ["query", str(idx), f"--paper={pid}2", "--json"])
        assert res.exit_code == 0, res.output
        hits = json.loads(res.stdout)["hits"]
        assert hits and all(h["title"] == titles[h["paper_id"]] for h in hits)  # as the corpus has them
        for args in (["info", str(idx)], ["info", str(idx), f"--paper={pid}"]):
            res = runner.invoke(app, args)
            assert res.exit_code == 0, res.output
            no_raw_control(res.output)

        for fmt in ("graphml", "gexf", "json"):
            res = runner.invoke(app, ["export", str(idx), "--format", fmt])
            assert res.exit_code == 0, res.output
            path = idx / f"graph.{fmt}"
            g = (nx.read_graphml(path) if fmt == "graphml" else nx.read_gexf(path) if fmt == "gexf"
                 else nx.node_link_graph(json.loads(path.read_text()), edges="edges"))
            assert g.number_of_nodes() == len(records)
            if fmt == "json":
                assert {str(n) for n in g.nodes} == {r["id"] for r in records}

        out = folder / "survey"
        res = runner.invoke(app, ["survey", str(idx), f"named entity recognition {topic}", "--out", str(out),
                                  "--sections", "1", "--quiet"])
        no_raw_control(res.output)
        if res.exit_code != 0:  # a topic the corpus does not cover is refused, clearly
            assert res.exit_code == 2 and "error:" in res.output, res.output
            return
        md = (out / "survey.md").read_text(encoding="utf-8")
        tokens = MarkdownIt("commonmark").parse(md)
        assert tokens and not [t for t in tokens if t.type == "html_block"]
        inline = [c for t in tokens if t.children for c in t.children]
        assert not [c for c in inline if c.type == "html_inline"], "paper or topic text became raw HTML"
        assert "\x00" not in md and "\x1b" not in md
        bib = parse_string((out / "references.bib").read_text(encoding="utf-8"), "bibtex")
        survey = json.loads((out / "survey.json").read_text(encoding="utf-8"))
        assert len(bib.entries) == len(survey["references"])
        assert_formats_in_plain_style(out / "references.bib", folder / "bibtex")
        surveys_written.append(title + abstract + topic)

    check()
    assert any(surveys_written), "no example with hostile text reached a written survey: its checks never ran"


def test_a_megabyte_long_field_is_printed_cut(base_index, encoder, tmp_path) -> None:
    """A 1 MB title was printed whole (as 17,000 folded table rows); the CLI now prints the start
    and end of any field (`cli.common.clip`), saying how much it left out. --json keeps it whole."""
    from graphbuild.build import BuildConfig, build_index

    long_title = "Named entity recognition " + "long " * 200_000 + "THE END"
    records = [*base_records(), {"id": "long-1", "title": long_title, "abstract": "We study named entity "
                                 "recognition for code. Our tagger improves F1.", "year": 2020}]
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    idx = tmp_path / "idx"
    build_index(corpus, idx, BuildConfig(), encoder=encoder, cache_from=base_index)
    other = records[0]["id"]
    for args in (["query", str(idx), "--paper=long-1"], ["info", str(idx), "--paper=long-1"],
                 ["query", str(idx), "--paper=" + "x" * 1_000_000]):  # an error message quoting the id
        res = runner.invoke(app, args)
        assert res.exit_code in (0, 2), res.output
        shown = " ".join(res.output.split())  # as read: the console wraps lines anywhere
        assert len(res.output) < 30_000 and "characters left out" in shown, (args[1:3], len(res.output))
        assert "THE END" in shown or "xxx" in shown  # its start and end are shown
    res = runner.invoke(app, ["info", str(idx), "--paper=long-1", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["title"] == long_title
    # as a result in the table of hits
    import io
    from types import SimpleNamespace

    from cli.common import SafeConsole
    from cli.query_cmd import print_hits

    out = SafeConsole(file=io.StringIO(), width=160)
    hit = SimpleNamespace(rank=1, score=0.5, paper_id="long-1", year=2020, title=long_title,
                          facet_label=lambda: "method 0.50")
    print_hits(SimpleNamespace(hits=[hit]), f"related to {other}", out)
    table = out.file.getvalue()
    squashed = re.sub(r"[\s│┃]", "", table)  # the title column folds words anywhere
    assert len(table) < 10_000 and "charactersleftout" in squashed and "THEEND" in squashed, table
