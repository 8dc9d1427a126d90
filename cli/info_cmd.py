"""`graft info`: what an index holds, or one paper's place in its graph."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import typer
from rich.table import Table

from cli.common import MAX_TITLE, clip, console, fail
from graft.errors import GraftError


def info(
    index: Path = typer.Argument(..., help="Index directory."),
    paper: str | None = typer.Option(None, "--paper", help="Show one corpus paper: its facet items, citation "
                                     "links and strongest edges per facet."),
    k: int = typer.Option(5, "--k", min=1, help="Edges shown per facet (with --paper)."),
    as_json: bool = typer.Option(False, "--json", help="Print as JSON."),
) -> None:
    """What an index holds (corpus, counts, settings, stages), or one paper's place in its graph."""
    from graft.describe import index_summary, paper_card
    from graft.facets import FACETS
    from graft.index import Index

    try:
        idx = Index.open(index)
        payload = paper_card(idx, paper, k=k) if paper is not None else index_summary(idx)
    except GraftError as exc:
        fail(exc)
    if as_json:
        typer.echo(json.dumps(payload, indent=2, default=str))
        return
    if paper is not None:
        head = f"{payload['paper_id']}: {payload['title']}" + (f" ({payload['year']})" if payload["year"] else "")
        console.print(head, highlight=False)
        for what, ids in (("cites", payload["cites"]), ("cited by", payload["cited_by"])):
            shown = ", ".join(ids[:12]) + (f", ... ({len(ids) - 12} more; --json lists all)" if len(ids) > 12 else "")
            console.print(f"{what} {len(ids)} corpus paper(s)" + (f": {shown}" if ids else ""), highlight=False,
                          soft_wrap=True)
        for facet in FACETS:
            t = Table(title=f"{facet}: " + " | ".join(payload["facets"][facet]), title_justify="left", show_lines=False)
            t.add_column("weight", justify="right")
            t.add_column("paper")
            t.add_column("title", overflow="fold", max_width=70)
            for e in payload["edges"][facet]:
                t.add_row(f"{e['weight']:.3f}", e["paper_id"], clip(e["title"], MAX_TITLE))
            console.print(t)
        return
    console.print(f"{payload['index']} · {payload['papers']} papers · {payload['citations']} citations · built "
                  f"{payload['built_at']} · corpus {str(payload['corpus_hash'])[:16]} ({payload['corpus_source']})",
                  highlight=False)
    t = Table(show_header=True)
    for col in ("facet", "items", "edges", "papers with an incoming edge", *(["DocIDs"] if "docids" in payload else [])):
        t.add_column(col, justify="left" if col == "facet" else "right")
    for facet in FACETS:
        f = payload["facets"][facet]
        share = f["share_with_incoming_edge"]
        t.add_row(facet, str(f["items"]), str(f["edges"]), "" if share is None else f"{100 * share:.1f}%",
                  *([str(payload["docids"][facet])] if "docids" in payload else []))
    console.print(t)
    settings = " · ".join(f"{key} {value}" for key, value in payload["build"].items())
    emb = payload["embedding"]
    console.print(f"build: {settings} · encoder {emb['model']} on {emb['backend']}", highlight=False)
    fb = payload.get("extractor_fallback")
    if fb:
        console.print(f"extractor: {fb['fallback']} of {fb['papers']} papers have the heuristic extractor's items, "
                      f"not the LLM's ({fb['failed']} requests failed, {fb['discarded']} answers discarded); "
                      "a rebuild asks the LLM again for the failed ones", style="yellow", highlight=False)
    if "pairs" in payload:
        pr = payload["pairs"]
        console.print(f"training pairs: {pr['pairs']} ({pr['sampling']} sampling) · papers learnable "
                      f"{100 * (pr['papers_share'] or 0):.1f}% · DocIDs learnable {100 * (pr['docids_share'] or 0):.1f}%",
                      highlight=False)
    if "model" in payload:
        md = payload["model"]
        console.print(f"trained model: {md['base_model']} · {md['sampling']} sampling · {md['steps']} steps · final "
                      f"loss {md['final_loss']:.3f} · {md['trained_at']}", highlight=False)
        from graft.check import PromptCheck

        check = PromptCheck.from_dict(md.get("check"))
        if check is not None:
            console.print(f"prompt check: {check.summary()}", highlight=False, soft_wrap=True)
            if check.warning():
                console.print(f"warning: {check.warning()}", style="yellow", highlight=False, soft_wrap=True)
    elif "unfinished_model" in payload:
        u = payload["unfinished_model"]
        of = f" of {u['total_steps']:,}" if u.get("total_steps") else ""
        flags = "".join(f" --{k.replace('_', '-')} {shlex.quote(str(v))}" for k, v in (
            ("base_model", u.get("base_model")), ("sampling", u.get("sampling")), ("max_edges", u.get("max_edges")),
            *((k, u["config"].get(k)) for k in ("epochs", "max_steps", "batch_size", "lr")))
            if v is not None)
        console.print(f"unfinished model: its training stopped at step {u['step']:,}{of} (last checkpoint); queries "
                      f"use the graph teacher until `graft train {shlex.quote(str(payload['index']))}{flags}` "
                      "resumes and finishes it", highlight=False, soft_wrap=True)
    else:
        console.print("no trained model: queries use the graph teacher (`graft train INDEX` on a GPU)", highlight=False)


