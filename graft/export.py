"""An index exported: its graph through networkx, for exploration and other graph tools (GraphML,
GEXF, JSON), and bibliographies of its papers (BibTeX, RIS, CSL-JSON: `graft.bibliography`) for a
selection (a view, a multi-seed query, a query's results, a survey's references, or every paper).

The sparse matrices stay the storage; this builds a MultiDiGraph with one edge per (facet, i -> j)
carrying `facet` and `weight`, and paper metadata on the nodes. In GraphML each edge's id is its key
and its number in the file (`method-17`, `cites-9001`: unique, as the format asks).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import networkx as nx

from graft.errors import GraftError
from graft.facets import FACETS
from graft.index import Index
from graft.store import atomic_path, folder_problem

#: Formats of the graph (`export_graph`).
EXPORT_FORMATS = ("graphml", "gexf", "json")
#: Every format `graft export` writes: the graph's, then the bibliographies' (`export_bibliography`).
ALL_FORMATS = (*EXPORT_FORMATS, "bibtex", "ris", "csljson")


#: Characters XML 1.0 does not allow (most C0 control characters, surrogates, U+FFFE/U+FFFF): a
#: title from PDF extraction may hold a form feed, which would make GraphML and GEXF unreadable.
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _target(out: str | Path) -> Path:
    """`out` as the path of a file to write; a folder, or a parent that is not a writable folder, is a
    GraftError saying so."""
    out = Path(out)
    problem = "is a folder" if out.is_dir() else folder_problem(out.parent)
    if problem:
        raise GraftError(f"cannot export to {out}: {out if out.is_dir() else out.parent} {problem}; give the "
                         "path of the file to write")
    return out


def xml_safe(text: str) -> str:
    """`text` with each character XML 1.0 does not allow replaced by a space."""
    return _NOT_XML.sub(" ", text)


def to_networkx(index: Index, facets: tuple[str, ...] = FACETS, clean: bool = False,
                citations: bool = True) -> nx.MultiDiGraph:
    """The facet graph as a MultiDiGraph: papers (title, n_citations, year, venue), one edge per
    (facet, i -> j) with `relation` "facet", `facet` and `weight`, and with `citations` one edge per
    citation inside the corpus (citing -> cited, key "cites") with `relation` "citation", an empty
    `facet` and weight 1; `clean`: texts made `xml_safe` (GraphML, GEXF).

    Raises:
        GraftError: `facets` is one string, or names a facet that is not one of `FACETS`.
    """
    if isinstance(facets, str):  # would be read one letter at a time
        raise GraftError(f"facets= takes a tuple of facet names, not one string: facets=({facets!r},)")
    unknown = [f for f in facets if f not in FACETS]
    if unknown:
        raise GraftError(f"unknown facet(s) {', '.join(map(repr, unknown))}; use {', '.join(FACETS)}")
    text = xml_safe if clean else str
    g = nx.MultiDiGraph(name=f"graft:{text(index.path.name)}")
    papers = index.papers
    for pid, title, year, venue, n_cit in zip(papers["paper_id"].to_list(), papers["title"].to_list(),
                                              papers["year"].to_list(), papers["venue"].to_list(),
                                              papers["n_citations"].to_list()):
        attrs = {"title": text(title or ""), "n_citations": int(n_cit or 0)}
        if year is not None:
            attrs["year"] = int(year)
        if venue:
            attrs["venue"] = text(venue)
        g.add_node(text(pid), **attrs)
    ids = [text(pid) for pid in index.paper_ids]
    for facet in facets:
        coo = index.graphs[facet].tocoo()
        for i, j, w in zip(coo.row.tolist(), coo.col.tolist(), coo.data.tolist()):
            g.add_edge(ids[i], ids[j], key=facet, relation="facet", facet=facet, weight=round(float(w), 6))
    if citations:
        for citing, cited in zip(index.citations["citing"].to_list(), index.citations["cited"].to_list()):
            g.add_edge(text(citing), text(cited), key="cites", relation="citation", facet="", weight=1.0)
    return g


def export_graph(index: Index, out: str | Path, fmt: str) -> Path:
    """Write the facet graph as GraphML, GEXF or node-link JSON (atomically); in the XML formats,
    characters XML does not allow become spaces (JSON keeps every text as it is).

    Raises:
        GraftError: an unknown format, `out` a folder or under a path that is not a writable
            folder, or the file cannot be written.
    """
    if fmt not in EXPORT_FORMATS:
        raise GraftError(f"export format '{fmt}' is unknown; allowed: {', '.join(EXPORT_FORMATS)}")
    out = _target(out)
    g = to_networkx(index, clean=fmt != "json")
    try:
        with atomic_path(out) as tmp:
            if fmt == "graphml":
                # GraphML wants edge ids unique in the document; networkx would write each edge's key
                # (its facet, or "cites"), so thousands of edges would share an id
                for n, (_, _, key, data) in enumerate(g.edges(keys=True, data=True)):
                    data["id"] = f"{key}-{n}"
                nx.write_graphml(g, tmp, edge_id_from_attribute="id")
            elif fmt == "gexf":
                nx.write_gexf(g, tmp)
            else:
                tmp.write_text(json.dumps(nx.node_link_data(g, edges="edges"), indent=1), encoding="utf-8")
    except OSError as exc:
        raise GraftError(f"cannot export to {out} ({exc.strerror or exc})") from None
    return out


# --------------------------------------------------------------------------- bibliographies


def selected_papers(index: Index, *, paper: str | None = None, seeds: str | Path | None = None,
                    results: str | Path | None = None, survey: str | Path | None = None, k: int = 20,
                    on_note: Any = None) -> list[str]:
    """The corpus papers a bibliography lists, in order: with `paper`, its view (the paper, then its
    `k` related papers as `graft query --paper` returns them); with `seeds` (a library file), its papers
    in the index, then their `k` fused related papers (`Searcher.seeds`); with `results`, the hits of
    a `graft query --json` output (one result or a list of them); with `survey`, a survey folder's
    references (its survey.json, in citation order); with none, every paper of the index.

    Raises:
        GraftError: more than one selection, an unknown id, an unreadable file.
    """
    given = [name for name, v in (("--paper", paper), ("--seeds", seeds), ("--results", results),
                                  ("--survey", survey)) if v is not None]
    if len(given) > 1:
        raise GraftError(f"give one of --paper, --seeds, --results, --survey, not {' and '.join(given)}")
    if paper is not None or seeds is not None:
        from graft.query import QueryConfig, Searcher

        searcher = Searcher(index, QueryConfig(k=k), on_note=on_note)
        if paper is not None:
            return [paper, *(h.paper_id for h in searcher.paper(paper).hits)]
        from graft.library import match_library, read_library

        ids = match_library(read_library(seeds), index.papers).paper_ids
        if not ids:
            raise GraftError(f"--seeds {seeds}: none of its entries is in the index (graft import lists them)")
        return [*ids, *(h.paper_id for h in searcher.seeds(ids).hits)]
    if results is not None:
        data = _read_json(Path(results), "a `graft query --json` output")
        items = data if isinstance(data, list) else [data]
        if not all(isinstance(x, dict) and isinstance(x.get("hits"), list) for x in items):
            raise GraftError(f"{results}: not a `graft query --json` output (an object with 'hits', or a list of them)")
        ids = [str(h.get("paper_id")) for x in items for h in x["hits"] if isinstance(h, dict)]
    elif survey is not None:
        folder = Path(survey)
        data = _read_json(folder / "survey.json" if folder.is_dir() else folder, "a survey's survey.json")
        refs = data.get("references") if isinstance(data, dict) else None
        if not isinstance(refs, list):
            raise GraftError(f"{survey}: its survey.json has no 'references' list; give a folder `graft survey` wrote")
        ids = [str(r["paper_id"]) for r in sorted(refs, key=lambda r: r.get("number", 0)) if isinstance(r, dict)]
    else:
        return list(index.paper_ids)
    unknown = [p for p in ids if p not in index.row_of]
    if unknown:
        raise GraftError(f"{len(unknown)} paper(s) of {results or survey} are not in index '{index.path}', e.g. "
                         f"{unknown[0]!r}: was it written for another index?")
    return list(dict.fromkeys(ids))


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8-sig"))
    except FileNotFoundError:
        raise GraftError(f"{path} not found; give {what}") from None
    except (OSError, ValueError) as exc:
        raise GraftError(f"{path}: cannot read it as JSON ({exc}); give {what}") from None


def export_bibliography(index: Index, out: str | Path, fmt: str, paper_ids: list[str]) -> Path:
    """Write the bibliography of `paper_ids` (`graft.bibliography`: BibTeX, RIS or CSL-JSON), atomically.

    Raises:
        GraftError: an unknown format or id, or `out` not a writable file path.
    """
    from graft.bibliography import BIB_FORMATS, entries, render

    if fmt not in BIB_FORMATS:
        raise GraftError(f"bibliography format '{fmt}' is unknown; allowed: {', '.join(BIB_FORMATS)}")
    out = _target(out)
    text = render(entries(index, paper_ids), fmt)
    try:
        with atomic_path(out) as tmp:
            tmp.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise GraftError(f"cannot export to {out} ({exc.strerror or exc})") from None
    return out
