"""How a whole `graft build` grows with the corpus: every stage's wall time and the process's peak
resident memory at its end, for corpora of growing size (synthetic ones from
`experiments/synth_corpus.py`), and each stage's growth exponent between the smallest and the
largest size (t ~ n^b).

Each size is one fresh process running the build as `graft build` does (the stage timings and peaks
of its summary, query files and store compaction included); the
build settings are the same for every size, so that only n changes: by default the static encoder
(`training/static_encoder.py`; MiniLM's sentence pass alone would take hours at 10^5 papers on
2 cores) with the rules scorer, and approximate candidates at every size (`--candidates`, HNSW by
default).

    python -m experiments.build_growth --corpora /tmp/synth-1e4.jsonl.gz,/tmp/synth-1e5.jsonl.gz \
        --work /tmp/build-growth --model /tmp/minilm-static [--engine local|ray] [--name _1e5]

Writes docs/results/build_growth{NAME}.{md,json}.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from experiments.common import add_results_argument, growth_exponent, parser, write_tables


def build_here(corpus: str, out: str, model: str, engine: str, candidates: str) -> dict:
    """One build in this process, as `graft build` runs it: papers, each stage's seconds and the
    process's peak RSS (MiB) in it (the build summary's: the query files and store compaction too)."""
    from graft.build_config import BuildConfig
    from graft.progress import Reporter
    from graphbuild.build import build_index

    config = BuildConfig(embedding_model=model, facet_scorer="rules", candidates=candidates)
    if engine == "ray":
        from graphbuild.ray_engine import RaySettings, build_index_ray

        summary = build_index_ray(corpus, out, config, settings=RaySettings(), reporter=Reporter(quiet=True),
                                  fresh=True)
    else:
        summary = build_index(corpus, out, config, reporter=Reporter(quiet=True), fresh=True)
    return {"papers": summary.counts["papers"], "stages_s": summary.timings,
            "peak_mib": {k: v / 2**20 for k, v in summary.peaks.items()},
            "edges": sum(summary.counts["edges"].values())}


def build_once(corpus: str, out: Path, model: str, engine: str, candidates: str) -> dict:
    """`build_here` in a fresh process (its peak RSS its own), with the whole process's wall time."""
    cmd = [sys.executable, "-m", "experiments.build_growth", "--one", corpus, str(out), "--model", model,
           "--engine", engine, "--candidates", candidates, "--corpora", corpus, "--work", str(out.parent)]
    t0 = time.perf_counter()
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if res.returncode:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{res.stderr[-3000:]}")
    return {"corpus": corpus, "engine": engine, "wall_s": wall, **json.loads(res.stdout.strip().splitlines()[-1])}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--corpora", required=True, help="corpora of growing size (comma-separated, smallest first)")
    ap.add_argument("--work", required=True, help="folder for the indexes built (one per size)")
    ap.add_argument("--model", required=True, help="encoder folder for every build (e.g. the static encoder)")
    ap.add_argument("--engine", default="local", choices=("local", "ray"))
    ap.add_argument("--candidates", default="hnsw", choices=("exact", "faiss", "hnsw", "auto"))
    ap.add_argument("--name", default="", help="suffix of the results files")
    ap.add_argument("--one", nargs=2, metavar=("CORPUS", "OUT"), help=argparse.SUPPRESS)
    add_results_argument(ap)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(build_here(args.one[0], args.one[1], args.model, args.engine, args.candidates)))
        return 0
    rows = []
    for corpus in args.corpora.split(","):
        out = Path(args.work) / f"{Path(corpus).name}.{args.engine}"
        rows.append(build_once(corpus, out, args.model, args.engine, args.candidates))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    stages = list(dict.fromkeys(s for r in rows for s in r["stages_s"]))
    first, last = rows[0], rows[-1]
    meta = {"date": dt.date.today().isoformat(), "cpus": os.cpu_count(), "machine": platform.machine(),
            "python": platform.python_version(), "model": args.model, "engine": args.engine,
            "candidates": args.candidates,
            "command": "python -m experiments.build_growth " + " ".join(argv if argv is not None else sys.argv[1:])}
    sizes = " | ".join(f"{r['papers']:,} s | MiB" for r in rows)
    lines = ["# A whole build on corpora of growing size", "",
             f"Command: `{meta['command']}`  ",
             f"Date: {meta['date']} · {meta['cpus']} cores, {meta['machine']}, Python {meta['python']} · engine "
             f"{args.engine} · encoder `{args.model}` (rules scorer) · candidates {args.candidates}", "",
             f"| stage | {sizes} | b (time) |",
             "|---|" + "---:|---:|" * len(rows) + "---:|"]
    for stage in stages:
        cells = " | ".join(f"{r['stages_s'].get(stage, 0):.1f} | {r['peak_mib'].get(stage, 0):,.0f}" for r in rows)
        b = growth_exponent(first["papers"], first["stages_s"].get(stage, 0), last["papers"], last["stages_s"].get(stage, 0))
        lines.append(f"| {stage} | {cells} | {'' if b is None else f'{b:.2f}'} |")
    cells = " | ".join(f"**{r['wall_s']:.1f}** | **{max(r['peak_mib'].values()):,.0f}**" for r in rows)
    b = growth_exponent(first["papers"], first["wall_s"], last["papers"], last["wall_s"])
    lines.append(f"| **whole process** | {cells} | {'' if b is None else f'{b:.2f}'} |")
    lines += ["", "- s: the stage's wall seconds (the build summary's); MiB: the build process's peak resident "
                  "memory during the stage; b: log(t_last / t_first) / log(n_last / n_first)",
              "- the whole process: starting Python, imports, every stage"]
    write_tables(args.results, f"build_growth{args.name}", meta, rows, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
