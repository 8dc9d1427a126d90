"""`graft export`: the facet graph and citation links through networkx."""

from __future__ import annotations

from pathlib import Path

import typer

from cli.common import console, fail
from graft.errors import GraftError


def export(
    index: Path = typer.Argument(..., help="Index directory."),
    format: str = typer.Option("graphml", "--format", "-f", help="graphml, gexf or json."),
    out: Path | None = typer.Option(None, "--out", "-o", help="Output file (default: INDEX/graph.FORMAT)."),
) -> None:
    """Export the facet graph and the corpus's citation links through networkx."""
    from graft.export import export_graph
    from graft.index import Index

    try:
        idx = Index.open(index)
        path = export_graph(idx, out or index / f"graph.{format}", format)
    except GraftError as exc:
        fail(exc)
    console.print(f"wrote {path}")


