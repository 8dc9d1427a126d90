"""A user's check of facet labels on a sparse corpus: named queries before / after the facet classifier.

    python -m experiments.facet_subset_check [--corpus cs768.jsonl.gz] [--start 408] [--every 15]
        [--builds rules,learned] [--name cs768]

The subset is every `--every`-th paper of the corpus file from line `--start` on (cs768: 410 papers),
the kind of small corpus a new user tries first. It is built once per `--builds` entry (`BUILDS`:
`rules`, the hand-set sentence scorer; `learned`, the defaults; `embeddings`, the defaults with
facet similarity and text coupling from the embeddings alone, no word overlap), and the named queries (MAML, `--queries`, and the two subset papers with the most citing papers in
the subset) are asked of the graph teacher, as `graft query INDEX --paper ID` does. For each query
and build: the query's own facet items, the top 10 with their facet labels, and how many of the
query's citation neighbours in the subset (papers citing it or cited by it) reach the top 10. This
is no leak-free evaluation (the teacher's citation half reads those links; `graft eval` is the
measurement): it shows what a user sees. Also per build: papers with one sentence as the item of two
facets, and build seconds. Results: docs/results/facet_subset_{name}.{md,json}.
"""

from __future__ import annotations

import argparse
import gzip
import json
import shlex
import sys
import time
from pathlib import Path

import polars as pl

from graft.build_config import BuildConfig
from graft.facets import FACETS
from graft.index import Index
from graft.query import QueryConfig, Searcher
from graphbuild.build import build_index

RESULTS_DIR = Path(__file__).resolve().parents[1] / "docs" / "results"
CS768 = Path(__file__).resolve().parents[2] / "shared" / "data" / "cs768" / "papers.jsonl.gz"
MAML = "1703.03400v3"

#: The builds compared, by name: what each changes of the defaults.
BUILDS = {
    "rules": {"facet_scorer": "rules"},
    "learned": {},
    "embeddings": {"lexical_weight": 0.0, "text_lexical_weight": 0.0},
}


def subset(corpus: Path, start: int, every: int) -> list[dict]:
    """Every `every`-th record of a JSONL(.gz) file from 1-based line `start` on."""
    opener = gzip.open if corpus.suffix == ".gz" else open
    with opener(corpus, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for n, line in enumerate(fh, start=1) if n >= start and (n - start) % every == 0]


def neighbours(records: list[dict]) -> dict[str, set[str]]:
    """Paper id -> ids in the subset that cite it or that it cites."""
    ids = {r["id"] for r in records}
    out: dict[str, set[str]] = {i: set() for i in ids}
    for r in records:
        for ref in r.get("references") or []:
            if ref in ids and ref != r["id"]:
                out[r["id"]].add(ref)
                out[ref].add(r["id"])
    return out


def shared_papers(facets_table) -> int:
    """Papers in which one item text is an item of two facets."""
    per = facets_table.group_by("paper_id", "text").agg(facets=pl.col("facet").n_unique())
    return int(per.filter(per["facets"] > 1)["paper_id"].n_unique())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=CS768)
    parser.add_argument("--start", type=int, default=408)
    parser.add_argument("--every", type=int, default=15)
    parser.add_argument("--queries", default=MAML, help="comma-separated paper ids asked besides the two most cited")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/facet-subset-check"))
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--builds", default="rules,learned", help=f"comma-separated, of {', '.join(BUILDS)}")
    parser.add_argument("--name", default="cs768", help="results: facet_subset_{name}.{md,json}")
    parser.add_argument("--reuse", action="store_true",
                        help="keep indexes already built in WORKDIR (and the build seconds of the last report)")
    args = parser.parse_args(argv)
    argv = sys.argv[1:] if argv is None else argv
    builds = [b for b in args.builds.split(",") if b]
    if len(builds) < 1 or any(b not in BUILDS for b in builds):
        parser.error(f"--builds takes a comma-separated list of {', '.join(BUILDS)}")
    result = args.results_dir / f"facet_subset_{args.name}"

    records = subset(args.corpus, args.start, args.every)
    args.workdir.mkdir(parents=True, exist_ok=True)
    path = args.workdir / "subset.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    near = neighbours(records)
    titles = {r["id"]: r["title"] for r in records}
    named = [q for q in args.queries.split(",") if q in near]
    named += [p for p in sorted(near, key=lambda p: (-len(near[p]), p)) if p not in named][:2]
    report: dict = {"command": " ".join(["python -m experiments.facet_subset_check", shlex.join(argv)]).strip(),
                    "papers": len(records), "queries": named, "builds": {}}
    for scorer in builds:
        out = args.workdir / scorer
        print(f"building {out} ({scorer}) ...", file=sys.stderr, flush=True)
        last = Path(f"{result}.json")
        if args.reuse and (out / "manifest.json").exists() and last.exists():
            seconds = json.loads(last.read_text(encoding="utf-8"))["builds"][scorer]["build_seconds"]
        else:
            t0 = time.perf_counter()
            build_index(path, out, BuildConfig(**BUILDS[scorer]), fresh=True)
            seconds = time.perf_counter() - t0
        index = Index.open(out)
        facets = index.facets
        searcher = Searcher(index, QueryConfig(retriever="teacher"))
        block: dict = {"build_seconds": round(seconds, 1), "papers_with_shared_item": shared_papers(facets),
                       "queries": {}}
        for q in named:
            own = facets.filter(facets["paper_id"] == q)
            items = {f: own.filter(own["facet"] == f)["text"].to_list() for f in FACETS}
            hits = searcher.paper(q).hits[:10]
            block["queries"][q] = {
                "items": items,
                "top10": [{"rank": h.rank, "paper_id": h.paper_id, "title": h.title, "label": h.facet_label(),
                           "neighbour": h.paper_id in near[q]} for h in hits],
                "neighbours": len(near[q]),
                "neighbours_in_top10": sum(h.paper_id in near[q] for h in hits),
            }
        report["builds"][scorer] = block
    lines = [f"# Facet labels on a sparse cs768 subset ({len(records)} papers), {' vs '.join(builds)}", "",
             f"- command: `{report['command']}`",
             "- subset: every 15th paper of cs768 from line 408; queries: MAML and the two subset papers with "
             "the most citation neighbours in the subset; retriever: the graph teacher "
             "(`graft query INDEX --paper ID`); neighbour = cites or is cited by the query in the subset "
             "(the teacher reads these links: a user's view, not a leak-free measurement)", "",
             "- builds: " + "; ".join(f"{b}: {BUILDS[b] or 'the defaults'}" for b in builds), "",
             "- build seconds are wall-clock on a shared 2-core machine; docs/facets.md has controlled timings", "",
             "| build | build s | papers with one item in two facets |", "|---|---:|---:|"]
    for scorer, block in report["builds"].items():
        lines.append(f"| {scorer} | {block['build_seconds']} | {block['papers_with_shared_item']} |")
    lines.append("")
    for q in named:
        lines += [f"## {titles[q]} ({q})", ""]
        for scorer, block in report["builds"].items():
            r = block["queries"][q]
            lines += [f"### {scorer}: {r['neighbours_in_top10']} of {r['neighbours']} neighbours in the top 10", ""]
            for f in FACETS:
                lines.append(f"- {f}: " + " | ".join(r["items"][f]))
            lines += ["", "| # | paper | label | neighbour |", "|---:|---|---|:---:|"]
            for h in r["top10"]:
                lines.append(f"| {h['rank']} | {h['title']} | {h['label']} | {'yes' if h['neighbour'] else ''} |")
            lines.append("")
    args.results_dir.mkdir(parents=True, exist_ok=True)
    Path(f"{result}.md").write_text("\n".join(lines), encoding="utf-8")
    Path(f"{result}.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
