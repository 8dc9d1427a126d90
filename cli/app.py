"""The Typer app. Each command parses options and calls one library function."""

from __future__ import annotations

import errno
import json
import os
import re
import shlex
import signal
import sys
import textwrap
from collections.abc import Container
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from cli.options import finite
from graft.errors import GraftError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="GRAFT: typed facet graphs over papers, facet-attributed retrieval and surveys.")
#: Control characters (but newline and tab) and the Unicode controls that reorder or hide text.
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


def safe(text: object) -> str:
    """`text` as it may reach a terminal: each control character (NUL, ESC of a colour code, a
    carriage return, a bidirectional override) shown as its escape (`\\x1b`), never sent raw."""
    return _UNPRINTABLE.sub(lambda m: ascii(m.group())[1:-1], str(text))


class SafeConsole(Console):
    """The CLI's consoles print text that comes from data (titles, ids, topics, file names, error
    messages quoting them) as it is: rich markup (`[/b]`) and emoji codes (`:x:`) are not read, and
    control characters go through `safe`. Styles are given with `style=` or `Text`, never as markup."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(markup=False, emoji=False, **kwargs)  # type: ignore[arg-type]

    def render_str(self, text: str, **kwargs: object) -> Text:  # type: ignore[override]
        return super().render_str(safe(text), **kwargs)  # type: ignore[arg-type]


console = SafeConsole()
err = SafeConsole(stderr=True)


def _fail(exc: Exception | str) -> None:
    err.print(Text.assemble(("error:", "bold red"), " ", safe(exc)), highlight=False, soft_wrap=True)
    raise typer.Exit(code=2)


def _fmt_bytes(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def print_build_summary(summary, out: Console = console) -> None:
    from graft.facets import FACETS

    c = summary.counts
    t = Table(title=f"graft build → {summary.index_dir}", show_header=True)
    t.add_column("stage")
    t.add_column("wall s", justify="right")
    t.add_column("peak RSS", justify="right")
    for name, secs in summary.timings.items():
        t.add_row(name, f"{secs:.1f}", _fmt_bytes(summary.peaks.get(name, 0)))
    out.print(t)
    if summary.seeded_from is not None:
        what = {"facets": "facets of {:,} papers", "titles": "{:,} title vectors",
                "papers": "{:,} title + abstract vectors"}
        copied = ", ".join(what[stage].format(count) for stage, count in summary.seeded.items())
        if any(summary.seeded.values()):
            out.print(f"copied from {summary.seeded_from} ({copied}): this corpus's papers and texts as that "
                      "index stores them", highlight=False)
        else:
            out.print(f"copied nothing from {summary.seeded_from}: its stores hold none of the papers this index "
                      "lacked, made with this model, batch size, device and extractor", highlight=False)
    if summary.reused:
        out.print(f"reused ({', '.join(summary.reused)}) from {summary.index_dir / 'cache' / 'build'}: papers "
                  "and texts taken apart and embedded by an earlier build with this model and extractor; "
                  "--fresh makes them again", highlight=False)
    if summary.removed:
        redo = []
        if any(not r.startswith("graph.") for r in summary.removed):
            redo.append(f"`graft train {summary.index_dir}` trains the generative retriever on the new one")
        if any(r.startswith("graph.") for r in summary.removed):
            redo.append(f"`graft export {summary.index_dir}` exports it")
        out.print(f"removed {', '.join(summary.removed)} of the graph this build replaced: {'; '.join(redo)}",
                  highlight=False)
    if summary.encoder_export is not None:
        size = summary.encoder_export.stat().st_size if summary.encoder_export.is_file() else 0
        out.print(f"stored the encoder's ONNX export for queries, which then start without torch: "
                  f"{summary.encoder_export} ({_fmt_bytes(size)}; one per model, safe to delete)", highlight=False)
    f = Table(show_header=True, title=f"{c['papers']} papers · {c['citations']} citations · "
                                      f"{c['skipped_records']} records skipped · "
                                      f"{c['dropped_references']} unknown references dropped")
    f.add_column("facet")
    f.add_column("items", justify="right")
    f.add_column("edges", justify="right")
    f.add_column("papers with an incoming edge", justify="right")
    for facet in FACETS:
        f.add_row(facet, str(c["facet_items"][facet]), str(c["edges"][facet]),
                  f"{100 * c['share_with_incoming_edge'][facet]:.1f}%")
    out.print(f)


@app.command()
def build(
    corpus: str = typer.Argument(..., help="JSONL / JSONL.gz / Parquet file, JSON file or folder (S2ORC documents, records or arrays of them), or 'aclsum'."),
    out: Path = typer.Option(..., "--out", "-o", help="Index directory to write."),
    extractor: str = typer.Option("heuristic", help="Facet extractor: heuristic (offline) or llm."),
    limit: int | None = typer.Option(None, min=1, help="Use only the first N valid records."),
    skip_bad: bool = typer.Option(False, "--skip-bad", help="Skip invalid records (counted and listed)."),
    embedding_model: str | None = typer.Option(None, help="Local sentence-transformers model folder."),
    device: str = typer.Option("cpu", help="Where the sentence encoder runs: cpu, cuda, cuda:N, mps, or auto "
                               "(a GPU if torch sees one)."),
    batch_size: int | None = typer.Option(None, min=1, help="Texts per sentence-encoder batch (default 16 on the "
                                          "CPU, 128 on a GPU)."),
    encoder_backend: str = typer.Option("auto", help="What runs the sentence encoder: auto (ONNX Runtime on the "
                                        "CPU: the same vectors, the cs768 build in 0.63x the time; torch on a GPU), "
                                        "torch, or onnx."),
    top_k: int = typer.Option(20, min=1, help="Out-edges kept per paper and facet."),
    alpha: float = typer.Option(0.75, parser=finite(0, 1), metavar="FLOAT",
                                help="In [0, 1]: share of facet similarity in an edge's weight; the citation score "
                                     "(coupling + co-citation) gets 1 - alpha."),
    title_weight: float = typer.Option(0.7, parser=finite(0, 100), metavar="FLOAT", help="In [0, 100]: weight of the paper's title vector added to each "
                                       "facet item's vector (0: items embedded alone)."),
    direct_links: bool = typer.Option(False, "--direct-links/--no-direct-links",
                                      help="Also take the papers a paper cites or is cited by as its graph "
                                           "candidates (off: facet-similar, coupled and co-cited papers only, "
                                           "as in the reference design)."),
    paper_embeddings: bool = typer.Option(True, "--paper-embeddings/--no-paper-embeddings",
                                          help="Embed each paper's title + abstract (embeddings/papers.npy): "
                                               "text coupling for queries without references, the dense "
                                               "baseline. Off saves that stage's time."),
    text_coupling: int | None = typer.Option(None, "--text-coupling", min=0, metavar="M",
                                             help="A paper with no citation link in the corpus takes the "
                                                  "title + abstract cosine of its M nearest papers as the "
                                                  "citation part of its edge weights (default 10; 0: off, "
                                                  "and with --no-paper-embeddings)."),
    llm_base_url: str | None = typer.Option(None, help="OpenAI-compatible base URL (extractor llm)."),
    llm_model: str | None = typer.Option(None, help="Model name for the LLM extractor."),
    llm_api_key_env: str = typer.Option("OPENAI_API_KEY", help="Environment variable holding the API key."),
    llm_concurrency: int = typer.Option(4, min=1, help="Concurrent LLM requests."),
    llm_timeout: float | None = typer.Option(None, "--llm-timeout", parser=finite(0.1, 3600), metavar="SECONDS",
                                             help="In [0.1, 3600]: seconds per LLM request attempt, for connecting, "
                                                  "the headers and the whole answer (default 60)."),
    llm_max_retries: int | None = typer.Option(None, "--llm-max-retries", min=0, max=20,
                                               help="Re-sends of a failed LLM request (default 5)."),
    fresh: bool = typer.Option(False, "--fresh", help="Recompute every paper's facets and embeddings instead "
                               "of reusing what an earlier or interrupted build kept in OUT/cache/build."),
    cache_from: Path | None = typer.Option(None, "--cache-from",
                                           help="Another index (same model and extractor) whose stored facets "
                                                "and embeddings of this corpus's papers are copied into "
                                                "OUT/cache/build first: a slice or variant of a corpus already "
                                                "built costs only its new papers and the graph. Only read."),
    allow_degraded: bool = typer.Option(False, "--allow-degraded",
                                        help="Extractor llm: write the index even when most papers got no usable "
                                             "answer and have the heuristic extractor's facets (otherwise the "
                                             "build stops with exit 2)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars and no summary."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Build the typed facet graph of a corpus into an index directory.

    Each paper's facets and embeddings are kept in OUT/cache/build as they are made: rerunning the
    command after a crash, with other graph settings (--top-k, --alpha, --title-weight), or on a corpus with
    papers added, removed or edited takes apart and embeds only the papers not seen before;
    --cache-from seeds them from another index.
    """
    from graft.progress import Reporter
    from graphbuild.build import BuildConfig, build_index
    from graphbuild.citations import TEXT_NEIGHBOURS

    try:
        llm = {}
        if extractor == "llm":
            if not (llm_base_url and llm_model):
                raise GraftError("--extractor llm needs --llm-base-url and --llm-model")
            llm = {"base_url": llm_base_url, "model": llm_model, "api_key_env": llm_api_key_env,
                   "max_concurrency": llm_concurrency,
                   **({} if llm_timeout is None else {"timeout_s": llm_timeout}),
                   **({} if llm_max_retries is None else {"max_retries": llm_max_retries})}
        config = BuildConfig(extractor=extractor, limit=limit, skip_bad=skip_bad,
                             embedding_model=embedding_model, embedding_device=device,
                             embedding_batch_size=batch_size, embedding_backend=encoder_backend, top_k=top_k,
                             title_weight=title_weight, alpha=alpha, beta=1.0 - alpha,
                             direct_links=direct_links, paper_embeddings=paper_embeddings,
                             text_coupling=(text_coupling if text_coupling is not None
                                            else TEXT_NEIGHBOURS if paper_embeddings else 0), llm=llm)
        summary = build_index(None if corpus == "aclsum" else corpus, out, config,
                              reporter=Reporter(quiet=quiet or as_json), fresh=fresh, cache_from=cache_from,
                              allow_degraded=allow_degraded)
    except (GraftError, ValueError) as exc:
        _fail(exc)
    if as_json:
        typer.echo(json.dumps({"index": str(summary.index_dir), "counts": summary.counts,
                               "timings_s": summary.timings, "peak_rss_bytes": summary.peaks,
                               "reused_checkpoints": summary.reused, "removed": summary.removed,
                               "cache_from": None if summary.seeded_from is None else
                               {"index": str(summary.seeded_from), "copied": summary.seeded},
                               "encoder_export": None if summary.encoder_export is None else str(summary.encoder_export)},
                              indent=2))
    elif not quiet:
        print_build_summary(summary)
    fell_back = (summary.counts.get("extractor") or {}) if extractor == "llm" else {}
    if fell_back.get("fallback"):
        err.print(f"warning: {fell_back['fallback']} of {summary.counts['papers']} papers have the heuristic "
                  f"extractor's facets, not the LLM's ({fell_back.get('failed', 0)} requests failed, "
                  f"{fell_back.get('discarded', 0)} answers discarded); a rebuild asks again for the failed ones",
                  style="yellow", highlight=False, soft_wrap=True)
    skipped = summary.report.get("skipped") or []
    for rec in skipped[:20]:
        err.print(f"skipped {rec['where']}: {rec['reason']}", highlight=False)
    if len(skipped) > 20:
        err.print(f"... and {len(skipped) - 20} more skipped records (see manifest.json)")


def print_hits(result, title: str, out: Console = console) -> None:
    t = Table(title=title, show_lines=False)
    t.add_column("#", justify="right")
    t.add_column("score", justify="right")
    # the id is what a reader copies into the next query: never cut, the title and facets fold instead
    t.add_column("paper", no_wrap=True, min_width=max((len(h.paper_id) for h in result.hits), default=5))
    t.add_column("year", justify="right")
    t.add_column("title", overflow="fold", max_width=60)
    t.add_column("facets (edge weight)", overflow="fold")
    for h in result.hits:
        t.add_row(str(h.rank), f"{h.score:.4f}", h.paper_id, str(h.year or ""), h.title, h.facet_label())
    out.print(t)


def print_matches(result, out: Console = console) -> None:
    """`--explain`: each result's facet credits in words, the query's item and the result's."""
    out.print("why, facet by facet: the query's item ↔ the result's item most alike (cosine of the two items)",
              highlight=False)
    for h in result.hits:
        matched = sorted(((f, e.match) for f, e in h.evidence.items() if e.match is not None),
                         key=lambda fm: -fm[1].cosine)
        if not matched:
            continue
        out.print(f"{h.rank:>3}. {h.paper_id} {textwrap.shorten(h.title, 80, placeholder=' …')}", highlight=False)
        for facet, m in matched:
            out.print(f"     {facet} {m.cosine:.2f}: “{m.query}” ↔ “{m.hit}”", highlight=False)


def _read_queries(path: Path, known: Container[str]) -> list[dict]:
    """`--queries` lines: a paper id, or a JSON record (an in-corpus `id`, or title + abstract). A
    record without an id is named `query-N` after its line, so that each has its own run-file qid;
    a corpus id outside `known` or an id on two lines is refused with its line."""
    from graphbuild.external import record_problem
    from graphbuild.related import is_outside

    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise GraftError(f"--queries {path}: cannot read it ({exc})") from None
    out: list[dict] = []
    first: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("{"):
            try:
                rec = json.loads(line)
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


def _heading(idx, record: dict) -> str:
    """The title line of a query's result table."""
    from graphbuild.related import is_outside

    if not is_outside(record):
        pid = str(record["id"])
        return f"related to {pid}: {idx.papers['title'][idx.row(pid)]}"
    return f"related to: {str(record.get('title', ''))[:80]}"


@app.command()
def query(
    index: Path = typer.Argument(..., help="Index directory."),
    paper: str | None = typer.Option(None, "--paper", help="Id of a corpus paper."),
    text: str | None = typer.Option(None, "--text", help="A paper outside the corpus: 'Title. Abstract ...'"),
    record: Path | None = typer.Option(None, "--record", help="A paper outside the corpus as a JSON file (title "
                                       "and/or abstract), or a corpus paper as {\"id\": ...}, as a --queries line."),
    queries: Path | None = typer.Option(None, "--queries",
                                        help="Batch: one paper id or JSON record per line (use with --trec-out)."),
    retriever: str | None = typer.Option(None, "--retriever",
                                         help="graft or teacher (default: graft when INDEX/model exists)."),
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
    explain: bool = typer.Option(False, "--explain",
                                 help="For each facet that surfaced a result, the query's item and the "
                                      "result's item most alike, with their cosine (--json: evidence.match)."),
    as_json: bool = typer.Option(False, "--json", help="Print results as a JSON list."),
    trec_out: Path | None = typer.Option(None, "--trec-out", help="Write a TREC run file."),
) -> None:
    """Related papers, each with the facet(s) that surfaced it."""
    from graft.index import RETRIEVERS, Index, has_model, teacher_fusion_error

    try:
        given = [x for x in (paper, text, record, queries) if x is not None]
        if len(given) != 1:
            raise GraftError("give exactly one of --paper ID, --text 'Title. Abstract', --record FILE.json, "
                             "--queries FILE")
        from graft.devices import resolve_device

        device = resolve_device(device)  # checked whatever the retriever: the teacher would ignore a bad name
        if trec_out is not None:
            from graft.store import folder_problem

            where = trec_out if trec_out.is_dir() else trec_out.parent
            problem = "is a folder" if where == trec_out else folder_problem(where)
            if problem:
                raise GraftError(f"--trec-out {trec_out}: {where} {problem}; give the path of a run file to write")
        idx = Index.open(index)
        chosen = retriever or ("graft" if has_model(index) else "teacher")
        if chosen not in RETRIEVERS:
            raise GraftError(f"unknown --retriever {chosen!r}; use one of {', '.join(RETRIEVERS)}")
        from graphbuild.related import RelatedPapers, is_outside

        related = RelatedPapers(idx, retriever=chosen, fusion=fusion, k=k, beams=beams, device=device,
                                text_neighbours=text_neighbours, feedback=feedback, citation_weight=citation_weight,
                                on_note=lambda note: err.print(note, highlight=False),  # stderr: --json too
                                explain=explain)
        if chosen == "teacher" and fusion not in (None, "rrf"):
            raise teacher_fusion_error(index, fusion, cli=True)

        if queries is not None:
            recs = _read_queries(queries, idx.row_of)
        elif paper is not None:
            recs = [{"id": paper}]
        else:
            from graphbuild.external import read_record, record_from_text

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
        ready: dict = {}
        outside = sum(map(is_outside, recs))
        if outside >= 2:  # taken apart together, in shared encoder batches
            from graft.progress import Reporter

            with Reporter(quiet=as_json).stage("facets of the papers outside the corpus", total=outside,
                                               unit="papers") as advance:
                ready = related.prepared(recs, progress=advance)
        results = [(related.query(r, ready.get(i)), _heading(idx, r)) for i, r in enumerate(recs)]
        if trec_out is not None:
            from graft.store import write_lines

            try:
                write_lines(trec_out, [line for result, _ in results for line in result.trec_lines()])
            except OSError as exc:
                raise GraftError(f"--trec-out {trec_out}: cannot write it ({exc})") from None
    except (GraftError, ValueError) as exc:
        _fail(exc)
    if as_json:
        payload = results[0][0].to_json() if len(results) == 1 and queries is None else \
            [{"query_id": r.query_id, "retriever": r.retriever, "fusion": r.fusion, "info": r.info,
              "hits": r.to_json()} for r, _ in results]
        typer.echo(json.dumps(payload, indent=2))
    elif queries is None:
        result, heading = results[0]
        print_hits(result, heading)
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


@app.command()
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
    except (GraftError, ValueError) as exc:
        _fail(exc)
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
                t.add_row(f"{e['weight']:.3f}", e["paper_id"], e["title"])
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
        from training.check import PromptCheck

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


@app.command()
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
        _fail(exc)
    console.print(f"wrote {path}")


@app.command()
def demo(
    out: Path = typer.Option(Path("demo-index"), "--out", help="Where to build the demo index."),
    paper: str | None = typer.Option(None, "--paper", help="Query paper (default: the best-connected one)."),
    limit: int | None = typer.Option(None, min=1, help="Use only the first N ACLSum papers (a quick look)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
) -> None:
    """Build the ACLSum demo graph, show a facet-labelled query and write a short survey."""
    import numpy as np

    from graft.index import Index
    from graft.progress import Reporter
    from graphbuild.build import BuildConfig, build_index

    try:
        if paper is not None:  # checked before the build, not after it
            from graphbuild.corpus import load_corpus

            ids = load_corpus(None, limit=limit).papers["paper_id"].to_list()
            if paper not in set(ids):
                close = [p for p in ids if p.startswith(paper[:8])][:5] if paper.strip() else []
                raise GraftError(f"--paper {paper!r} is not among the {len(ids)} ACLSum papers of the demo"
                                 + (f"; similar ids: {', '.join(close)}" if close else f", such as {ids[0]}"))
        summary = build_index(None, out, BuildConfig(limit=limit), reporter=Reporter(quiet=quiet))
        print_build_summary(summary)
        idx = Index.open(out)
        if paper is None:
            degree = sum(np.asarray((g > 0).sum(axis=0)).ravel() for g in idx.graphs.values())
            paper = idx.paper_ids[int(np.argmax(degree))]
        from graphbuild.external import CorpusScorer

        result = CorpusScorer(idx).query_paper(paper, k=10)  # as `graft query --paper` answers
        print_hits(result, f"related to {paper}: {idx.papers['title'][idx.row(paper)]}")
        survey_md = demo_survey(out, Reporter(quiet=quiet), console)
    except (GraftError, ValueError) as exc:
        _fail(exc)
    console.print(f"index: {out}  ·  try: graft query {out} --paper {paper} --json  ·  "
                  f"graft info {out} --paper {paper}")
    if survey_md is not None:
        console.print(f"survey: {survey_md}  ·  try: graft survey {out} \"your topic\" --out my-survey")


from cli.train_cmd import train  # noqa: E402  (the command module imports this one lazily)

app.command("train")(train)

from cli.eval_cmd import eval_app  # noqa: E402
from cli.survey_cmd import demo_survey, survey  # noqa: E402

app.command("survey")(survey)

from cli.serve_cmd import serve  # noqa: E402

app.command("serve")(serve)

app.add_typer(eval_app, name="eval")


#: Errors of the machine rather than of GRAFT (a read-only or full disk, no permission): one line, not a traceback.
_ENVIRONMENT_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT}


def _stop(signum: int, frame: object) -> None:
    """SIGINT and SIGTERM (what `kill` and job schedulers send) stop a command the same way, as an
    exception: its cleanups run (temporary files go, a survey keeps its old files, a build its old
    index) and a training run saves nothing half-made."""
    _stopped.append(signal.Signals(signum))
    raise KeyboardInterrupt


_stopped: list[signal.Signals] = []


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _stop)
    try:
        app(prog_name="graft")
    except (SystemExit, KeyboardInterrupt) as exc:
        if _stopped and (isinstance(exc, KeyboardInterrupt) or exc.code == 130):  # 130: Typer's exit for one
            err.print(f"stopped ({_stopped[0].name}): what was finished is kept; run the same command again to "
                      "go on (a build resumes from INDEX/cache, training from its last checkpoint, an eval run "
                      "reuses its finished run files)", highlight=False, soft_wrap=True)
            sys.exit(128 + _stopped[0].value)
        raise
    except OSError as exc:
        if exc.errno not in _ENVIRONMENT_ERRNOS:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        err.print(Text.assemble(("error:", "bold red"), " ", safe(f"{where}{exc.strerror}")), highlight=False,
                  soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
