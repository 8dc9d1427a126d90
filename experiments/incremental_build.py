"""What a grown corpus costs `graft build`: an index built without the corpus's newest papers is
rebuilt with them added, against a build of the whole corpus from scratch in the same run; and what
a slice of an indexed corpus costs with `--cache-from` that index.

    python -m experiments.incremental_build [--corpus PATH] [--added 500] [--work DIR] [--limit N]

Four builds, each a whole `build_index` with its own encoder, as `graft build` runs them:
1. base: the corpus without its `--added` newest papers (by year, then id; references to them
   dropped), into WORK/index (its files, less the stores, kept in WORK/base);
2. grown: the whole corpus into WORK/index, which looks up what build 1 stored in
   WORK/index/cache/build and takes apart and embeds only the added papers;
3. scratch: the whole corpus into WORK/scratch, from nothing (the baseline of 2);
4. seeded: the base corpus into WORK/seeded, from nothing but `cache_from` WORK/scratch (build 1
   is its baseline);
then how far 2 and 3, and 4 and 1, agree (`experiments.index_agreement`): items, vectors and
edges. Writes docs/results/incremental_build[_limitN].{md,json}.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from experiments.common import CS768, add_results_argument, parser, write_tables


def read_records(path: str | Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The corpus's JSON records (JSONL or JSONL.gz), the first `limit` if given, with references
    kept only inside them."""
    opener = gzip.open if str(path).endswith(".gz") else open
    records = []
    with opener(path, "rt", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                records.append(json.loads(line))
            if limit is not None and len(records) == limit:
                break
    ids = {r["id"] for r in records}
    return [{**r, "references": [x for x in r.get("references") or [] if x in ids]} for r in records]


def newest(records: list[dict[str, Any]], count: int) -> set[str]:
    """The ids of the `count` newest records: latest year first, then the larger id (arXiv ids grow
    with time within a year)."""
    ranked = sorted(records, key=lambda r: (r.get("year") or 0, r["id"]), reverse=True)
    return {r["id"] for r in ranked[:count]}


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def timed_build(corpus: Path, out: Path, *, fresh: bool, cache_from: Path | None = None) -> dict[str, Any]:
    """One `build_index` with its own encoder: wall seconds, peak RSS, stage timings, what it reused
    (and copied from `cache_from`)."""
    from graft.progress import Reporter
    from graphbuild.build import BuildConfig, build_index

    t0 = time.perf_counter()
    summary = build_index(corpus, out, BuildConfig(), reporter=Reporter(quiet=not sys.stderr.isatty()), fresh=fresh,
                          cache_from=cache_from)
    return {"wall_s": time.perf_counter() - t0, "peak_rss_bytes": max(summary.peaks.values()),
            "timings_s": summary.timings, "reused": summary.reused, "papers": summary.counts["papers"],
            "extractor": summary.counts["extractor"], "copied": summary.seeded}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--corpus", default=str(CS768), help="JSONL / JSONL.gz corpus (default: cs768)")
    ap.add_argument("--added", type=int, default=500, help="newest papers held back from the first build")
    ap.add_argument("--limit", type=int, default=None, help="only the corpus's first N records")
    ap.add_argument("--work", default="/tmp/graft-bench-incremental", help="folder of the corpora and indexes")
    add_results_argument(ap)
    args = ap.parse_args(argv)
    if not Path(args.corpus).exists():
        print(f"corpus not found: {args.corpus} (../shared/data is absent); nothing to measure")
        return 1
    records = read_records(args.corpus, args.limit)
    if not 0 < args.added < len(records):
        ap.error(f"--added must be between 1 and {len(records) - 1} (the corpus has {len(records)} records)")

    from experiments.encoder_backend import cpu_flags
    from experiments.index_agreement import agreement, agreement_lines
    from graft.index import Index

    work = Path(args.work)
    for old in ("index", "base", "scratch", "seeded"):
        shutil.rmtree(work / old, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    added = newest(records, args.added)
    kept = {r["id"] for r in records} - added
    base_corpus = write_jsonl(work / "base.jsonl", [{**r, "references": [x for x in r["references"] if x in kept]}
                                                    for r in records if r["id"] in kept])
    whole = write_jsonl(work / "whole.jsonl", records)

    base = timed_build(base_corpus, work / "index", fresh=True)
    shutil.copytree(work / "index", work / "base", ignore=lambda d, names: ["cache"] if Path(d) == work / "index"
                    else [])
    grown = timed_build(whole, work / "index", fresh=False)
    scratch = timed_build(whole, work / "scratch", fresh=True)
    seeded = timed_build(base_corpus, work / "seeded", fresh=False, cache_from=work / "scratch")
    agree = agreement(work / "index", work / "scratch")
    agree_seeded = agreement(work / "seeded", work / "base")
    idx = Index.open(work / "scratch")

    command = " ".join(["python -m experiments.incremental_build", *(argv if argv is not None else sys.argv[1:])])
    rows = [{"build": name, **run} for name, run in
            (("base (without the added papers)", base), ("grown: the whole corpus, incremental", grown),
             ("scratch: the whole corpus, from nothing", scratch),
             ("seeded: the base corpus, --cache-from the scratch index", seeded))]
    ratio = grown["wall_s"] / scratch["wall_s"]
    ratio_seeded = seeded["wall_s"] / base["wall_s"]
    meta = {"command": command, "date": dt.date.today().isoformat(), "corpus": args.corpus,
            "corpus_hash": idx.manifest["corpus_hash"], "papers": len(records), "added": len(added),
            "machine": {"cores": os.cpu_count(), "arch": platform.machine(), "cpu_flags": cpu_flags(),
                        "python": platform.python_version()},
            "encoder_backend": idx.manifest["embedding"].get("backend"),
            "grown_over_scratch": ratio, "agreement": agree,
            "seeded_over_base": ratio_seeded, "agreement_seeded": agree_seeded}
    lines = [
        f"# Incremental build ({Path(args.corpus).name}, {len(records):,} papers, the {len(added):,} newest added)",
        "",
        f"Command: `{command}`  ",
        f"Date: {meta['date']} · machine: {os.cpu_count()} cores, {platform.machine()} ({cpu_flags()}), Python "
        f"{platform.python_version()} · corpus hash `{meta['corpus_hash'][:16]}` · encoder backend "
        f"{meta['encoder_backend']}",
        "",
        "| build | papers | wall s | facets s | embed papers s | graph s | peak RSS MiB | reused |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        t = r["timings_s"]
        lines.append(f"| {r['build']} | {r['papers']:,} | {r['wall_s']:.1f} | {t.get('facets', 0):.1f} | "
                     f"{t.get('embed papers', 0):.1f} | {t.get('graph', 0):.1f} | "
                     f"{r['peak_rss_bytes'] / 2**20:,.0f} | {', '.join(r['reused']) or '–'} |")
    lines += [
        "",
        f"Grown / scratch wall time: **{ratio:.2f}×** ({grown['wall_s']:.1f} s vs {scratch['wall_s']:.1f} s).  ",
        f"Seeded / base wall time: **{ratio_seeded:.2f}×** ({seeded['wall_s']:.1f} s vs {base['wall_s']:.1f} s).",
        "",
        "Agreement of the grown index with the one from scratch (`experiments.index_agreement`):",
        "",
        *agreement_lines(agree, "grown", "scratch"),
        "",
        "Agreement of the seeded index with the base one:",
        "",
        *agreement_lines(agree_seeded, "seeded", "base"),
    ]
    stem = "incremental_build" if args.limit is None else f"incremental_build_limit{args.limit}"
    write_tables(args.results, stem, meta, rows, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
