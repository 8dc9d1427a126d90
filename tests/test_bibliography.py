"""Bibliographies of corpus papers (graft/bibliography.py): BibTeX, RIS and CSL-JSON written from real
corpus records and read back by bibtexparser, pybtex's plain style, rispy and citeproc-py."""

from __future__ import annotations

import json

import polars as pl
import pytest
from conftest import cs768_path

from graft.bibliography import bibtex, bibtex_text, csl_items, entries, plain_title, render, ris
from graft.errors import GraftError
from graphbuild.corpus import load_aclsum, load_corpus

#: Titles a corpus may hold: TeX specials as text, unbalanced braces, a backslash, control characters.
HOSTILE = ["Rates of 5% & 10_000 {unbalanced } brace} #1 ~ ^ \\ \x0c and \"quotes\"",
           "Top-$K$ Rank Aggregation with $\\mathcal{O}(n \\log n)$ comparisons and an open $ sign"]


@pytest.fixture(scope="module")
def papers() -> pl.DataFrame:
    """ACLSum's first 30 papers (authors, venues, ACL Anthology ids), cs768's papers whose titles
    hold TeX math (authorless, arXiv ids) and two hostile titles, one with a DOI."""
    acl = load_aclsum(limit=30).papers
    cs = load_corpus(cs768_path()).papers.filter(pl.col("title").str.contains("$", literal=True))
    hostile = cs.head(2).with_columns(pl.Series("title", HOSTILE), pl.Series("paper_id", ["h-1", "h_1"]),
                                      pl.Series("doi", ["10.1234/ABC(1)", None]))
    cols = ["paper_id", "title", "abstract", "year", "venue", "authors"]
    return pl.concat([acl.select(cols), cs.select(cols), hostile.select([*cols, "doi"])], how="diagonal")


def test_titles_keep_math_for_bibtex_and_read_it_for_plain_formats() -> None:
    title = r"Algorithms for $\ell_p$ Low Rank Approximation & 5% of {it}"
    assert bibtex_text(title) == r"Algorithms for $\ell_p$ Low Rank Approximation \& 5\% of \textbraceleft{}it\textbraceright{}"
    assert plain_title(title) == "Algorithms for ℓ_p Low Rank Approximation & 5% of it"
    assert plain_title("Improving accuracy by 5% & more") == "Improving accuracy by 5% & more"  # no TeX: as is
    assert bibtex_text(r"Caf{\'e} and $K_{33}$-free") == r"Café and $K_{33}$-free"
    assert bibtex_text("an open $ sign") == r"an open \$ sign"
    assert bibtex_text("unbalanced $x}$ math") == r"unbalanced \$x\textbraceright{}\$ math"


def test_bibtex_round_trips_through_bibtexparser_and_pybtex_plain_style(papers) -> None:
    """Every entry parses back (bibtexparser: no failed block; same keys, titles, identifiers) and
    pybtex's plain style formats every one, authorless cs768 papers included."""
    import bibtexparser
    from pybtex.database import parse_string
    from pybtex.plugin import find_plugin

    ids = papers["paper_id"].to_list()
    items = entries(papers, ids)
    text = bibtex(items)
    lib = bibtexparser.parse_string(text)
    assert lib.failed_blocks == [] and [e.key for e in lib.entries] == [e.key for e in items]
    got = {e.key: {k: f.value for k, f in e.fields_dict.items()} for e in lib.entries}
    ell = next(e for e in items if e.paper_id == "1705.06730v1")
    assert got[ell.key]["title"] == r"Algorithms for $\ell_p$ Low Rank Approximation"
    assert (got[ell.key]["eprint"], got[ell.key]["url"]) == ("1705.06730v1", "https://arxiv.org/abs/1705.06730v1")
    # no authors: plain style sorts and labels by the `key` field, the title as text
    assert "author" not in got[ell.key] and got[ell.key]["key"] == r"Algorithms for ℓ\_p Low Rank Approximation"
    acl = items[0]
    assert got[acl.key]["url"] == f"https://aclanthology.org/{acl.paper_id}" and " and " in got[acl.key]["author"]
    assert got[items[-2].key]["doi"] == "10.1234/abc(1)"
    assert len({e.key for e in items}) == len(items)  # h-1 and h_1 would share a key
    data = parse_string(text, "bibtex")
    style = find_plugin("pybtex.style.formatting", "plain")()
    formatted = [e.text.render_as("text") for e in style.format_bibliography(data)]
    assert len(formatted) == len(items)
    assert any("Algorithms for" in f and "arXiv:1705.06730v1" in f for f in formatted)
    assert any("Rates of 5% & 10_000" in f for f in formatted)


def test_ris_round_trips_through_rispy(papers) -> None:
    import rispy

    items = entries(papers, papers["paper_id"].to_list())
    back = rispy.loads(ris(items))
    assert [r["id"] for r in back] == [e.paper_id for e in items]
    assert [r["title"] for r in back] == [plain_title(e.title) for e in items]
    by_id = {r["id"]: r for r in back}
    assert by_id["1705.06730v1"]["title"] == "Algorithms for ℓ_p Low Rank Approximation"
    assert by_id["1705.06730v1"]["urls"] == ["https://arxiv.org/abs/1705.06730v1"]
    assert "arXiv:1705.06730v1" in by_id["1705.06730v1"]["notes"]
    first = items[0]
    assert by_id[first.paper_id]["authors"][0] == ", ".join(reversed(first.authors[0].rsplit(" ", 1)))
    assert by_id["h-1"]["doi"] == "10.1234/abc(1)"
    assert not ris(items).startswith("1.")  # no numbering line before a record


def test_csl_json_renders_every_item_in_citeproc(papers) -> None:
    """citeproc-py (a CSL processor) renders each item with the style it ships; each rendering holds
    the title as plain text and the item's URL."""
    from citeproc import Citation, CitationItem, CitationStylesBibliography, CitationStylesStyle, formatter
    from citeproc.source.json import CiteProcJSON

    items = entries(papers, papers["paper_id"].to_list())
    data = json.loads(render(items, "csljson"))
    assert data == csl_items(items) and data[0]["issued"] == {"date-parts": [[items[0].year]]}
    style = CitationStylesStyle("harvard-cite-them-right", validate=False)
    bib = CitationStylesBibliography(style, CiteProcJSON(data), formatter.plain)
    for item in data:
        bib.register(Citation([CitationItem(item["id"])]))
    rendered = [str(x) for x in bib.bibliography()]
    assert len(rendered) == len(data)
    text = "\n".join(rendered)
    for item in data:
        assert item["title"][:30] in text and item.get("URL", "") in text


def test_unknown_ids_and_formats_are_refused(papers) -> None:
    with pytest.raises(GraftError, match="not in the corpus, e.g. 'nope'"):
        entries(papers, ["nope"])
    with pytest.raises(GraftError, match="allowed: bibtex, ris, csljson"):
        render([], "endnote")
