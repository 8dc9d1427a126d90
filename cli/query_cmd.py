"""`graft query`: related papers through the query front door (`graft.query.Searcher`)."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Container
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from cli.common import MAX_TITLE, clip, console, err, fail
from cli.options import finite
from graft.errors import GraftError


def print_hits(result, title: str, out: Console = console) -> None:
    t = Table(title=title, show_lines=False)
    t.add_column("#", justify="right")
    t.add_column("score", justify="right")
    # the id is what a reader copies into the next query: never cut, the title and facets fold instead
    t.add_column("paper", no_wrap=True, min_width=max((len(h.paper_id) for h in result.hits), default=5))
    t.add_column("year", justify="right")
    t.add_column("title", overflow="fold", max_width=60)
    t.add_column("facets that stand out (edge weight)", overflow="fold")
    for h in result.hits:
        t.add_row(str(h.rank), f"{h.score:.4f}", h.paper_id, str(h.year or ""), clip(h.title, MAX_TITLE),
                  h.facet_label())
    out.print(t)


def print_matches(result, out: Console = console) -> None:
    """`--explain`: each result's facet credits in words, the query's item and the result's."""
    out.print("why, facet by facet: the query's item ↔ the result's item most alike (their cosine as the "
              "facet graph compares them)", highlight=False)
    for h in result.hits:
        matched = sorted(((f, e.match) for f, e in h.evidence.items() if e.match is not None),
                         key=lambda fm: -fm[1].cosine)
        if not matched:
            continue
        out.print(f"{h.rank:>3}. {h.paper_id} {textwrap.shorten(h.title, 80, placeholder=' …')}", highlight=False)
        for facet, m in matched:
            out.print(f"     {facet} {m.cosine:.2f}: “{m.query}” ↔ “{m.hit}”", highlight=False)
            if m.words:
                out.print(f"       words both papers use in their {facet} items and titles: {', '.join(m.words)}",
                          highlight=False)


def _read_queries(path: Path, known: Container[str]) -> list[dict]:
    """`--queries` lines: a paper id, or a JSON record (an in-corpus `id`, or title + abstract). A
    record without an id is named `query-N` after its line, so that each has its own run-file qid;
    a corpus id outside `known` or an id on two lines is refused with its line."""
    from graft.jsonio import MAX_FILE_BYTES, MAX_LINE_BYTES, loads
    from graft.records import is_outside, record_problem

    try:
        if path.stat().st_size > MAX_FILE_BYTES:
            raise GraftError(f"--queries {path}: {path.stat().st_size:,} bytes, more than the {MAX_FILE_BYTES:,} "
                             "GRAFT reads; split it into smaller files")
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise GraftError(f"--queries {path}: cannot read it ({exc})") from None
    out: list[dict] = []
    first: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if len(line) > MAX_LINE_BYTES:
            raise GraftError(f"{path} line {n}: {len(line):,} characters, longer than the {MAX_LINE_BYTES:,} GRAFT "
                             "reads as one query")
        if line.startswith("{"):
            try:
                rec = loads(line, f"{path} line {n}")  # a line nested too deep: JSONLimitError, a GraftError
            except json.JSONDecodeError as exc:
                raise GraftError(f"{path} line {n}: not valid JSON ({exc}); give a paper id or a JSON record") from None
        else:
            rec = {"id": line}
        problem = record_problem(rec)
        if problem is not None:
            raise GraftError(f"{path} line {n}: {problem}")
        if rec.get("id") is None:
            rec = {**rec, "id": f"query-{n}"}
        qid = str(rec["id"])
        if not is_outside(rec) and qid not in known:
            raise GraftError(f"{path} line {n}: paper {qid!r} is not in the index; a paper outside the corpus is "
                             "given as a JSON record with its title and abstract")
        if qid in first:
            raise GraftError(f"{path} line {n}: query id {qid!r} is also on line {first[qid]}; each query needs "
                             "its own id (its qid in the TREC run file)")
        first[qid] = n
        out.append(rec)
    if not out:
        raise GraftError(f"--queries {path}: no queries in it (one paper id or JSON record a line)")
    return out


def _seed_ids(path: Path, idx) -> list[str]:
    """The corpus papers of a library file (`graft.library`), the entries not in the index named on
    stderr; none in the index is an error."""
    from graft.library import match_library, read_library

    match = match_library(read_library(path), idx.papers)
    missing = match.unmatched
    if not match.paper_ids:
        raise GraftError(f"--seeds {path}: none of its {len(match.matches)} entries is in the index (matched by DOI, "
                         "arXiv id, URL or title); `graft import` lists them")
    if missing:
        err.print(f"note: {len(missing)} of the {len(match.matches)} entries of {path.name} are not in the index and "
                  f"are not seeds (e.g. {missing[0].where}: {(missing[0].title or missing[0].key)[:60]!r}); "
                  f"graft import {path} --index {idx.path} lists them", highlight=False, soft_wrap=True)
    return match.paper_ids


def _heading(idx, record: dict, result) -> str:
    """The title line of a query's result table: the query, and who answered it (retriever, fusion,
    model)."""
    from graft.records import is_outside

    if not is_outside(record):
        pid = str(record["id"])
        what = f"related to {pid}: {idx.paper_column('title')[idx.row(pid)]}"
    else:
        what = f"related to: {str(record.get('title', ''))[:80]}"
    return f"{what}\n{result.answered_by()}"


def query(
    index: Path = typer.Argument(..., help="Index directory."),
    paper: str | None = typer.Option(None, "--paper", help="Id of a corpus paper."),
    text: str | None = typer.Option(None, "--text", help="A paper outside the corpus: 'Title. Abstract ...'"),
    record: Path | None = typer.Option(None, "--record", help="A paper outside the corpus as a JSON file (title "
                                       "and/or abstract), or a corpus paper as {\"id\": ...}, as a --queries line."),
    queries: Path | None = typer.Option(None, "--queries",
                                        help="Batch: one paper id or JSON record per line (use with --trec-out)."),
    seeds: Path | None = typer.Option(None, "--seeds", help="A library (.bib, .ris, CSL .json, or .txt of DOIs / "
                                      "arXiv ids): its papers in the index are the query, their related papers "
                                      "fused (graft import shows what matches)."),
    retriever: str | None = typer.Option(None, "--retriever",
                                         help="graft or teacher (default: graft when INDEX/model holds a model "
                                              "that passed its prompt check, else the teacher, with a note)."),
    fusion: str | None = typer.Option(None, "--fusion",
                                      help="graph-rrf, rrf or graph-walk (graft; the teacher uses rrf)."),
    k: int = typer.Option(20, "--k", min=1, help="Results to return."),
    beams: int = typer.Option(20, "--beams", min=1, help="Beams per facet item (graft retriever)."),
    device: str = typer.Option("cpu", "--device",
                               help="Where the graft retriever decodes: cpu, cuda, cuda:N, mps or auto."),
    references: str | None = typer.Option(None, "--references",
                                          help="With --text/--record: comma-separated ids of corpus papers the "
                                               "query paper cites; they are not returned (teacher: their citation "
                                               "links and coupling also shape the result)."),
    text_neighbours: int = typer.Option(10, "--text-neighbours", min=0,
                                        help="A paper outside the corpus: its N nearest papers by title + abstract "
                                             "stand in for its citations (teacher: text coupling, when it lists "
                                             "no references into the corpus; graft: the text channel, labelled "
                                             "'reads like it') (0 = off)."),
    feedback: int | None = typer.Option(None, "--feedback", min=0,
                                        help="Teacher: the citation links of the N papers a first pass ranks "
                                             "highest (never the query's references) join the query's citation "
                                             "half (default 3 for a paper outside the corpus, 0 for a corpus "
                                             "paper, whose stored rows are walked; 0 = off)."),
    citation_weight: float = typer.Option(3.0, "--citation-weight", parser=finite(0), metavar="FLOAT",
                                          help="The citation channel: the papers that cite or are cited by the "
                                               "first 3 results join the fusion as a fifth list of this weight "
                                               "(each facet's weighs 1), labelled 'cited with' (0 = off)."),
    citation_keep: int = typer.Option(3, "--citation-keep", min=0,
                                      help="The first N results of the facet fusion stay first: the citation "
                                           "channel adds papers after them (0 = it may reorder all)."),
    since: int | None = typer.Option(None, "--since", min=1, max=9999,
                                     help="Only results published in or after this year (papers without a year "
                                          "are left out)."),
    until: int | None = typer.Option(None, "--until", min=1, max=9999,
                                     help="Only results published in or before this year."),
    venue: list[str] | None = typer.Option(None, "--venue",
                                           help="Only results of this venue (as the corpus names it, any case; "
                                                "repeat for several, e.g. --venue ACL --venue EMNLP)."),
    explain: bool = typer.Option(False, "--explain",
                                 help="For each facet that surfaced a result, the query's item and the "
                                      "result's item most alike, with their cosine (--json: evidence.match)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as a JSON object (query_id, retriever, "
                                 "fusion, model, info, hits); with --queries a list of them."),
    trec_out: Path | None = typer.Option(None, "--trec-out", help="Write a TREC run file."),
) -> None:
    """Related papers, each with the facet(s) that surfaced it."""
    from graft.fusion import FUSIONS
    from graft.index import Index
    from graft.query import QueryConfig, Searcher, teacher_fusion_error
    from graft.records import is_outside

    try:
        given = [x for x in (paper, text, record, queries, seeds) if x is not None]
        if len(given) != 1:
            raise GraftError("give exactly one of --paper ID, --text 'Title. Abstract', --record FILE.json, "
                             "--queries FILE, --seeds LIBRARY")
        if retriever == "teacher" and fusion in FUSIONS and fusion != "rrf":
            raise teacher_fusion_error(index, fusion, cli=True)
        config = QueryConfig(retriever=retriever, fusion=fusion, k=k, beams=beams, device=device,
                             text_neighbours=text_neighbours, feedback=feedback, citation_weight=citation_weight,
                             citation_keep=citation_keep, explain=explain, since=since, until=until,
                             venues=tuple(venue or ()))
        from graft.devices import resolve_device

        resolve_device(device)  # checked whatever the retriever: the teacher would ignore a bad name
        if trec_out is not None:
            from graft.store import folder_problem

            where = trec_out if trec_out.is_dir() else trec_out.parent
            problem = "is a folder" if where == trec_out else folder_problem(where)
            if problem:
                raise GraftError(f"--trec-out {trec_out}: {where} {problem}; give the path of a run file to write")
        idx = Index.open(index)
        related = Searcher(idx, config, on_note=lambda note: err.print(note, highlight=False))  # stderr: --json too

        if seeds is not None:
            if references is not None:
                raise GraftError("--references goes with --text or --record (a paper outside the corpus)")
            result = related.seeds(_seed_ids(seeds, idx), query_id="seeds")
            recs, results = [], [(result, f"related to {len(result.info['seeds'])} seeds of {seeds.name}\n"
                                          f"{result.answered_by()}")]
        elif queries is not None:
            recs = _read_queries(queries, idx.row_of)
        elif paper is not None:
            recs = [{"id": paper}]
        else:
            from graft.records import read_record, record_from_text

            if text is not None and text.strip() and not any(ch.isalnum() for ch in text):
                raise GraftError(f"query text {text.strip()[:40]!r} has no words: pass --text \"Title. Abstract ...\"")
            recs = [record_from_text(text) if text is not None else read_record(record)]
            if references is not None:
                given = [r.strip() for r in references.split(",") if r.strip()]
                unknown = [r for r in given if r not in idx.row_of]
                if unknown:
                    raise GraftError(f"--references: {len(unknown)} id(s) not in the index, e.g. {unknown[0]!r}")
                recs[0]["references"] = list(dict.fromkeys([*(recs[0].get("references") or []), *given]))
        if references is not None and (paper is not None or queries is not None or not is_outside(recs[0])):
            raise GraftError("--references goes with --text or --record (a paper outside the corpus)")
        related.check(recs)
        unknown_refs = [(i, r) for i, rec in enumerate(recs, start=1) if is_outside(rec)
                        for r in rec.get("references") or [] if str(r) not in idx.row_of]
        if unknown_refs:  # a reference outside the corpus cannot couple: said (on stderr), not hidden
            i, ref = unknown_refs[0]
            err.print(f"note: {len(unknown_refs)} reference(s) of {len({q for q, _ in unknown_refs})} query paper(s) "
                      f"are not in the index and count for nothing (e.g. query {i}: {ref!r})",
                      highlight=False, soft_wrap=True)
        if queries is not None and trec_out is None and not as_json:
            raise GraftError(f"--queries {queries}: {len(recs)} queries would run and show nothing; write their "
                             "results with --trec-out FILE or print them with --json")
        if seeds is None:
            outside = sum(map(is_outside, recs))
            if queries is None:
                results = [related.record(recs[0])]
            elif outside >= 2:  # taken apart together, in shared encoder batches
                from graft.progress import Reporter

                with Reporter(quiet=as_json).stage("facets of the papers outside the corpus", total=outside,
                                                   unit="papers") as advance:
                    results = related.batch(recs, progress=advance)
            else:
                results = related.batch(recs)
            results = [(result, _heading(idx, r, result)) for r, result in zip(recs, results)]
        if trec_out is not None:
            from graft.store import write_lines

            try:
                write_lines(trec_out, [line for result, _ in results for line in result.trec_lines()])
            except OSError as exc:
                raise GraftError(f"--trec-out {trec_out}: cannot write it ({exc})") from None
    except GraftError as exc:
        fail(exc)
    if as_json:
        payload = results[0][0].to_dict() if len(results) == 1 and queries is None else \
            [r.to_dict() for r, _ in results]
        typer.echo(json.dumps(payload, indent=2))
    elif queries is None:
        result, heading = results[0]
        print_hits(result, heading)
        if seeds is not None:
            near = result.info["surfaced_by"]
            several = sum(len(near[h.paper_id]) > 1 for h in result.hits)
            console.print(f"seeds: {', '.join(result.info['seeds'])} · {several} of the results are among the first "
                          f"{result.info['seed_depth']} of several seeds (each seed's results fused by RRF)",
                          highlight=False)
        if result.info.get("query_facets"):  # a paper outside the corpus: its facets as read from its text
            for facet, items in result.info["query_facets"].items():
                console.print(f"its {facet}: " + " | ".join(items), highlight=False)
        if explain:
            print_matches(result)
        if "dropped" in result.info:
            console.print(f"{result.info['dropped']} candidates without a supporting edge dropped")
        if result.info.get("feedback"):
            console.print(f"feedback pass: the citation links of the first {result.info['feedback']} papers of a "
                          "first pass joined the query's citation half (--feedback 0: one pass)")
        cited = [h for h in result.hits if h.citation is not None]
        if cited:
            first = cited[0].citation.first
            console.print(f"cited with: {len(cited)} results cite or are cited by some of the first {first} results of "
                          f"the facet fusion (the citation channel; --citation-weight 0: off)")
        reads = [h for h in result.hits if h.text is not None]
        if reads:
            console.print(f"reads like it: {len(reads)} results are among the query's {result.info['text_neighbours']} "
                          f"nearest papers by title + abstract (the text channel; --text-neighbours 0: off)")
    else:
        console.print(f"{len(results)} queries" + (f" · run file {trec_out}" if trec_out else ""))


