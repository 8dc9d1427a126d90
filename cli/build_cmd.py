"""`graft build`: a corpus into an index directory, and its summary table."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from cli.common import console, err, fail
from cli.options import finite
from graft.errors import GraftError


def fmt_bytes(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def print_build_summary(summary, out: Console = console) -> None:
    from graft.facets import FACETS

    c = summary.counts
    t = Table(title=f"graft build → {summary.index_dir}", show_header=True)
    t.add_column("stage")
    t.add_column("wall s", justify="right")
    t.add_column("peak RSS", justify="right")
    for name, secs in summary.timings.items():
        t.add_row(name, f"{secs:.1f}", fmt_bytes(summary.peaks.get(name, 0)))
    out.print(t)
    if summary.seeded_from is not None:
        what = {"facets": "facets of {:,} papers", "titles": "{:,} title vectors",
                "context": "{:,} items read in context", "papers": "{:,} title + abstract vectors"}
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
    if summary.kept is not None:
        out.print(f"moved the generative retriever trained on the graph this build replaced to {summary.kept} "
                  f"(with its DocIDs, training pairs and manifest); `graft train {summary.index_dir}` trains one on "
                  "the new graph", highlight=False)
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
                  f"{summary.encoder_export} ({fmt_bytes(size)}; one per model, safe to delete)", highlight=False)
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


def build(
    corpus: str = typer.Argument(..., help="JSONL / JSONL.gz / Parquet file, JSON file or folder (S2ORC documents, records or arrays of them), OpenAlex works (a snapshot's works folder, or 'openalex:PATH?field=17&year=2015-2020': docs/scale.md), or 'aclsum'."),
    out: Path = typer.Option(..., "--out", "-o", help="Index directory to write."),
    extractor: str = typer.Option("heuristic", help="Facet extractor: heuristic (offline) or llm."),
    facet_scorer: str = typer.Option("learned", help="How the offline extractor scores sentences: learned (the "
                                     "ACLSum-trained facet classifier) or rules (the hand-set weights of "
                                     "indexes built before it)."),
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
    title_weight: float = typer.Option(0.35, parser=finite(0, 100), metavar="FLOAT", help="In [0, 100]: weight of the paper's title vector added to each "
                                       "facet item's vector (0: no title). 0.35 is tuned for --item-context late; "
                                       "with --item-context title, 0.7 (the earlier default)."),
    item_context: str = typer.Option("late", "--item-context", metavar="title|late",
                                     help="What a facet item's vector reads besides its own text: late (its tokens "
                                          "read inside the paper's whole title + abstract, one encoder pass a "
                                          "paper, then the title mixed in; docs/facets.md) or title (the item "
                                          "alone, then the title mixed in). A static encoder has no tokens to "
                                          "read: its items are built as title."),
    direct_links: bool = typer.Option(False, "--direct-links/--no-direct-links",
                                      help="Also take the papers a paper cites or is cited by as its graph "
                                           "candidates (off: facet-similar, coupled and co-cited papers only, "
                                           "as in the reference design)."),
    linked_candidates: int | None = typer.Option(None, "--linked-candidates", min=0, metavar="M",
                                                 help="Coupled or co-cited papers scored as a paper's graph "
                                                      "candidates: the M with the highest citation score "
                                                      "(default 100; 0: all, whose number grows with the "
                                                      "corpus: docs/scale.md)."),
    citation_partners: int | None = typer.Option(None, "--citation-partners", min=0, metavar="P",
                                                 help="Coupled and co-cited papers counted a paper: the P most "
                                                      "counted of each (default 200; 0: all, whose number "
                                                      "grows faster than the corpus: docs/scale.md)."),
    paper_embeddings: bool = typer.Option(True, "--paper-embeddings/--no-paper-embeddings",
                                          help="Embed each paper's title + abstract (embeddings/papers.npy): "
                                               "text coupling for queries without references, the dense "
                                               "baseline. Off saves that stage's time."),
    text_coupling: int | None = typer.Option(None, "--text-coupling", min=0, metavar="M",
                                             help="A paper with no citation link in the corpus takes the "
                                                  "title + abstract cosine of its M nearest papers as the "
                                                  "citation part of its edge weights (default 10; 0: off, "
                                                  "and with --no-paper-embeddings)."),
    lexical_weight: float = typer.Option(0.5, "--lexical-weight", parser=finite(0, 1), metavar="FLOAT",
                                         help="In [0, 1]: share of word overlap (TF-IDF cosine of a paper's title "
                                              "and items of the facet) in facet similarity; the items' embeddings "
                                              "get the rest (0: embeddings alone; docs/facets.md)."),
    text_lexical_weight: float = typer.Option(0.5, "--text-lexical-weight", parser=finite(0, 1), metavar="FLOAT",
                                              help="In [0, 1]: share of word overlap (TF-IDF cosine of title + "
                                                   "abstract) in the similarity that picks a link-less paper's "
                                                   "text coupling neighbours (0: embeddings alone)."),
    candidates: str = typer.Option("auto", help="How each paper's facet-similar candidates are found: exact "
                                   "(every pair compared, n^2), faiss (an IVF index: docs/scale.md), hnsw (an "
                                   "HNSW graph), or auto (hnsw from --faiss-min-papers papers on)."),
    faiss_min_papers: int = typer.Option(50_000, min=1, help="Papers from which --candidates auto uses hnsw."),
    faiss_nprobe: int = typer.Option(16, min=1, help="IVF lists (of 2 sqrt(papers)) searched per paper with "
                                     "faiss candidates: more keep more of the exact candidates, slower."),
    hnsw_ef: int = typer.Option(128, min=1, help="Entries kept while searching the HNSW graph with hnsw "
                                "candidates (at least the 100 candidates): more keep more of the exact ones, "
                                "slower."),
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
                               "of reusing what an earlier or interrupted build kept in OUT/cache/build (OUT/cache/ray with "
                               "--engine ray)."),
    cache_from: Path | None = typer.Option(None, "--cache-from",
                                           help="Another index (same model and extractor) whose stored facets "
                                                "and embeddings of this corpus's papers are copied into "
                                                "OUT/cache/build first: a slice or variant of a corpus already "
                                                "built costs only its new papers and the graph. Only read."),
    allow_degraded: bool = typer.Option(False, "--allow-degraded",
                                        help="Extractor llm: write the index even when most papers got no usable "
                                             "answer and have the heuristic extractor's facets (otherwise the "
                                             "build stops with exit 2)."),
    engine: str = typer.Option("local", help="local (this process) or ray (the per-paper and graph stages on a "
                               "Ray cluster; needs `pip install 'ray[data]'`; docs/scale.md)."),
    address: str | None = typer.Option(None, "--address", help="--engine ray: the address of a running Ray "
                                       "cluster (e.g. ray://head:10001 or auto); none starts a local Ray."),
    shard_papers: int = typer.Option(2000, min=1, help="--engine ray: papers per shard (the unit mapped, "
                                     "checkpointed and resumed)."),
    actors: int | None = typer.Option(None, min=1, help="--engine ray: per-paper actors (default: the cluster's "
                                      "CPUs but one)."),
    actor_gpus: float = typer.Option(0.0, parser=finite(0, 64), metavar="FLOAT",
                                     help="In [0, 64], --engine ray: GPUs each per-paper actor holds (with "
                                          "--device cuda; a fraction shares one GPU between actors)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars and no summary."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Build the typed facet graph of a corpus into an index directory.

    Each paper's facets and embeddings are kept in OUT/cache/build as they are made: rerunning the
    command after a crash, with other graph settings (--top-k, --alpha, --title-weight, --item-context once
    both were built), or on a corpus with
    papers added, removed or edited takes apart and embeds only the papers not seen before;
    --cache-from seeds them from another index.
    """
    from graft.citations import CITATION_PARTNERS, TEXT_NEIGHBOURS
    from graft.edges import LINKED_CANDIDATES
    from graft.progress import Reporter
    from graphbuild.build import BuildConfig, build_index

    try:
        llm = {}
        if extractor == "llm":
            if not (llm_base_url and llm_model):
                raise GraftError("--extractor llm needs --llm-base-url and --llm-model")
            llm = {"base_url": llm_base_url, "model": llm_model, "api_key_env": llm_api_key_env,
                   "max_concurrency": llm_concurrency,
                   **({} if llm_timeout is None else {"timeout_s": llm_timeout}),
                   **({} if llm_max_retries is None else {"max_retries": llm_max_retries})}
        config = BuildConfig(extractor=extractor, facet_scorer=facet_scorer, limit=limit, skip_bad=skip_bad,
                             embedding_model=embedding_model, embedding_device=device,
                             embedding_batch_size=batch_size, embedding_backend=encoder_backend, top_k=top_k,
                             title_weight=title_weight, item_context=item_context, alpha=alpha, beta=1.0 - alpha,
                             direct_links=direct_links,
                             linked_candidates=LINKED_CANDIDATES if linked_candidates is None else linked_candidates,
                             citation_partners=CITATION_PARTNERS if citation_partners is None else citation_partners,
                             paper_embeddings=paper_embeddings,
                             candidates=candidates, faiss_min_papers=faiss_min_papers, faiss_nprobe=faiss_nprobe,
                             hnsw_ef=hnsw_ef, lexical_weight=lexical_weight,
                             text_lexical_weight=text_lexical_weight, text_coupling=(text_coupling if text_coupling is not None
                                            else TEXT_NEIGHBOURS if paper_embeddings else 0), llm=llm)
        # before any work, even with --quiet: what happens to a trained model
        def note(text: str) -> None:
            err.print(f"note: {text}", highlight=False, soft_wrap=True)

        if engine == "ray":
            from graphbuild.ray_engine import RaySettings, build_index_ray

            if cache_from is not None or allow_degraded:
                raise GraftError("--cache-from and --allow-degraded are options of the local engine")
            summary = build_index_ray(None if corpus == "aclsum" else corpus, out, config,
                                      settings=RaySettings(address=address, shard_papers=shard_papers, actors=actors,
                                                           actor_gpus=actor_gpus),
                                      reporter=Reporter(quiet=quiet or as_json), fresh=fresh, on_note=note)
        elif engine == "local":
            if address is not None:
                raise GraftError("--address is an option of --engine ray")
            summary = build_index(None if corpus == "aclsum" else corpus, out, config,
                                  reporter=Reporter(quiet=quiet or as_json), fresh=fresh, cache_from=cache_from,
                                  allow_degraded=allow_degraded, on_note=note)
        else:
            raise GraftError(f"--engine {engine!r} is unknown; allowed: local, ray")
    except GraftError as exc:
        fail(exc)
    if as_json:
        typer.echo(json.dumps({"index": str(summary.index_dir), "counts": summary.counts,
                               "timings_s": summary.timings, "peak_rss_bytes": summary.peaks,
                               "reused_checkpoints": summary.reused, "removed": summary.removed,
                               "kept": None if summary.kept is None else str(summary.kept),
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


