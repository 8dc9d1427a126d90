"""`graft import`: a reference manager's export (BibTeX, RIS, CSL-JSON, a list of DOIs / arXiv ids)
matched to a corpus, and its papers with abstracts written as corpus records."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import typer
from rich.table import Table

from cli.common import console, fail
from graft.errors import GraftError


def import_(
    library: Path = typer.Argument(..., help="A library file: .bib (BibTeX), .ris, .json (CSL-JSON) or .txt "
                                   "(one DOI or arXiv id a line)."),
    index: Path | None = typer.Option(None, "--index", help="Match against this index's papers."),
    corpus: str | None = typer.Option(None, "--corpus", help="Match against this corpus (a corpus file, or "
                                      "'aclsum'); with --out its records are written first."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Write a corpus JSONL for `graft build`: the "
                                    "--corpus's papers, then the library's entries outside it that carry an "
                                    "abstract."),
    fmt: str | None = typer.Option(None, "--format", "-f", help="bibtex, ris, csljson or ids (default: from "
                                   "the file's suffix)."),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Skip invalid records of --corpus."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON: every entry, its match and how."),
) -> None:
    """Match a library to a corpus by DOI, arXiv id, URL or title; say what matched and how, and
    write its other papers with abstracts as corpus records (--out)."""
    from graphbuild.imports import import_library

    try:
        result = import_library(library, fmt=fmt, index=index, corpus=corpus, out=out, skip_bad=skip_bad)
    except GraftError as exc:
        fail(exc)
    if as_json:
        typer.echo(json.dumps(result.as_dict(), indent=2, ensure_ascii=False))
        return
    match = result.match
    added = {e.where: r["id"] for e, r in result.added}
    t = Table(title=f"{match.library.source}: {len(match.matches)} entries ({match.library.format})"
              + (f" matched against {result.against}" if result.against else ""))
    t.add_column("entry", overflow="fold", max_width=28)
    t.add_column("title", overflow="fold", max_width=50)
    t.add_column("corpus paper", no_wrap=True)
    t.add_column("matched by")
    no_abstract = {e.where for e in result.no_abstract}  # the unmatched entries --out cannot add
    for m in match.matches:
        e = m.entry
        if m.paper_id is not None:
            status = m.how
        else:
            status = "not in the corpus" + (f" ({m.note})" if m.note else "")
            if e.where in no_abstract:
                status += "; no abstract, so not a corpus paper"
            elif out is not None:
                status += f"; added as {added[e.where]}"
        t.add_row(e.key or e.where, textwrap.shorten(e.title or "", 80, placeholder=" …"), m.paper_id or "", status)
    console.print(t)
    counts = match.counts()
    summary = " · ".join(f"{n} by {how}" for how, n in counts.items() if how in ("doi", "arxiv", "url", "title") and n)
    console.print(f"matched {len(match.matches) - counts['unmatched']} of {counts['entries']}"
                  + (f" ({summary})" if summary else "") + f" · {counts['unmatched']} not in the corpus", highlight=False)
    for line in match.library.unreadable:
        console.print(f"unreadable: {line}", highlight=False)
    if result.out is not None:
        console.print(f"wrote {result.out}: {result.corpus_papers} corpus papers + {len(result.added)} from the "
                      f"library · next: graft build {result.out} --out idx", highlight=False)
    elif match.paper_ids and index is not None:
        console.print(f"query them together: graft query {index} --seeds {library}", highlight=False)
