"""Issue #5's GPU run: train the generative retriever on a split's graph twice (coverage-aware and
naive distillation pairs) and evaluate `graft`, `graft-rrf`, `graft-walk`, `graft-naive`,
`graft-cite` and `graft-text` (out of corpus) where they were trained, in one command (a trained model is too large to come back
from the device machine).

Three sub-commands (experiments/gpu/README.md says how to stage and run them with the device tool):

    prepare  (here, CPU)  precompute what needs the sentence encoder (out-of-corpus facets and edge
                          rows, the non-obvious measure's nearest papers), build DocIDs and the
                          coverage-aware pairs, and stage everything with the wheels the device image
                          lacks and SmolLM2's GGUF in pieces under .gpu/eval/{a,b,...}, each under
                          the 64 MiB carry limit
    run      (GPU)        install the carried wheels, join the GGUF, train both models within a time
                          budget (calibrated steps, the same for both), evaluate the in-corpus (test
                          part), out-of-corpus and attribution suites within the rest of the budget
                          (a query limit calibrated on the GPU), and write tables, a report and the
                          runs into --out (default $OUT) after every step
    run --smoke (CPU)     the same code path with the tiny model, a few steps and a few queries

The device image has torch, transformers, accelerate, sentence-transformers (without model files),
pyarrow, scipy and networkx; polars, marisa-trie and gguf travel as wheels. Nothing in the run
needs the sentence encoder: out-of-corpus facets and rows come from `SPLITDIR/ooc/facets.jsonl` and
the nearest-paper sets from `SPLITDIR/runs/{suite}.obvious.json`, both made by `prepare`. The
staged index carries an empty `embeddings/items.npy` (0 x dim) in place of the 25 MiB of item
embeddings; the run fills it with NaN of the recorded shape, so that the index opens and anything
that would read them gets NaN instead of stale numbers. The model is trained on the in-corpus test
part's leak-free index (`SPLITDIR/incorpus/test/index`), which answers both suites.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import traceback
from pathlib import Path
from typing import Any

from experiments.gpu.gpu_common import (
    CARRY_LIMIT,
    CARRY_MARGIN,
    bootstrap,
    download_wheels,
    env_info,
    folder_bytes,
    free,
    join_parts,
    sha256_file,
    split_file,
    sync,
)

REPO = Path(__file__).resolve().parents[2]

STAGE_JSON = "stage.json"
DATA_NAME = "data.tar.gz"
GGUF_PART = "smollm2.gguf.part{}"
#: Files of the built index that the run needs (the item embeddings are replaced, see the docstring).
INDEX_FILES = ("manifest.json", "papers.parquet", "facets.parquet", "citations.parquet", "graph/problem.npz",
               "graph/method.npz", "graph/result.npz", "graph/contribution.npz", "graph/citation.npz")
#: Files of the split that the run reads.
SPLIT_FILES = ("split.json", "incorpus/queries.jsonl", "incorpus/qrels.txt", "ooc/queries.jsonl", "ooc/qrels.txt",
               "ooc/facets.jsonl", "runs/incorpus.obvious.json", "runs/ooc.obvious.json")
#: Wheels the device image lacks (versions pinned to this environment's).
WHEELS = ("polars", "polars-runtime-32", "marisa-trie", "gguf")
#: The modules those wheels provide: nothing the run imports before installing them may need one.
CARRIED_MODULES = ("polars", "marisa_trie", "gguf")
# the coverage model's fusions (one decoding per query) first, so a budget that runs out takes the naive model's
GRAFT_SYSTEMS = ("graft", "graft-rrf", "graft-walk", "graft-cite", "graft-text", "graft-naive")
SAMPLINGS = ("coverage", "naive")
#: Largest file the device machine returns is 16 MiB; the results bundle stays under this.
BUNDLE_LIMIT = 15 * 2**20
SUITES = ("incorpus", "ooc", "attribution")


# ---- prepare (CPU) -------------------------------------------------------------------------------
def _pack(sizes: dict[str, int], gguf_bytes: int, capacity: int) -> list[dict[str, Any]]:
    """Assign pieces to carry folders: the data archive (and stage.json) to the last folder, wheels
    first-fit from the first, and the GGUF cut to fill what is left, folder by folder.

    Args:
        sizes: name -> bytes of the unsplittable pieces; the one named `DATA_NAME` goes last.
        gguf_bytes: size of the GGUF file.
        capacity: bytes one folder may hold.
    Returns:
        per folder, {"pieces": [names], "gguf": bytes of the GGUF in it (0 if none)}.
    Raises:
        ValueError: a piece alone exceeds the capacity.
    """
    big = [n for n, b in sizes.items() if b > capacity]
    if big:
        raise ValueError(f"{', '.join(big)} alone exceed one carry ({capacity / 2**20:.0f} MiB)")
    total = sum(sizes.values()) + gguf_bytes
    n = max(1, math.ceil(total / capacity))
    while True:
        folders = [{"pieces": [], "bytes": 0, "gguf": 0} for _ in range(n)]
        folders[-1]["pieces"].append(DATA_NAME)
        folders[-1]["bytes"] += sizes[DATA_NAME] + 2**16  # stage.json
        fits = True
        for name, b in sorted(((k, v) for k, v in sizes.items() if k != DATA_NAME), key=lambda x: -x[1]):
            spot = next((f for f in folders if f["bytes"] + b <= capacity), None)
            if spot is None:
                fits = False
                break
            spot["pieces"].append(name)
            spot["bytes"] += b
        left = gguf_bytes
        for f in folders:
            take = min(left, capacity - f["bytes"])
            f["gguf"], f["bytes"], left = take, f["bytes"] + take, left - take
        if fits and left == 0:
            return [{"pieces": f["pieces"], "gguf": f["gguf"]} for f in folders]
        n += 1


def _data_archive(split: Path, index: Path, out: Path) -> dict[str, Any]:
    """`data.tar.gz`: `index/` (the build artefacts the run reads, DocIDs, coverage-aware pairs,
    an empty item-embedding array) and `split/` (queries, qrels, out-of-corpus facets, nearest-paper
    sets). Returns what went in."""
    import numpy as np

    dim = int(np.load(index / "embeddings" / "items.npy", mmap_mode="r").shape[1])
    empty = out.parent / "items.empty.npy"
    np.save(empty, np.zeros((0, dim), dtype=np.float16))
    files = [(index / rel, f"index/{rel}") for rel in INDEX_FILES]
    files += [(p, f"index/{p.relative_to(index)}") for p in sorted((index / "docids").rglob("*")) if p.is_file()]
    files += [(index / "train" / "pairs.parquet", "index/train/pairs.parquet"), (empty, "index/embeddings/items.npy")]
    files += [(split / rel, f"split/{rel}") for rel in SPLIT_FILES]
    missing = [str(src) for src, _ in files if not src.is_file()]
    if missing:
        raise SystemExit(f"cannot stage: missing {', '.join(missing)}")
    with tarfile.open(out, "w:gz", compresslevel=6) as tar:
        for src, arc in files:
            tar.add(src, arcname=arc)
    info = {"files": [arc for _, arc in files], "bytes_uncompressed": sum(src.stat().st_size for src, _ in files)}
    empty.unlink()
    return info


def _unread_item_embeddings(index: Path) -> None:
    """Replace the staged index's empty `embeddings/items.npy` (0 x dim) by a NaN array of the shape
    its manifest records, so that the index opens (its files are checked against each other) while
    anything that read the item vectors would get NaN, never stale numbers."""
    import numpy as np

    path = index / "embeddings" / "items.npy"
    dim = int(np.load(path, mmap_mode="r").shape[1])
    counts = json.loads((index / "manifest.json").read_text())["stages"]["build"]["counts"]
    items = np.lib.format.open_memmap(path, mode="w+", dtype=np.float16, shape=(sum(counts["facet_items"].values()), dim))
    items[:] = np.nan
    items.flush()
    del items


def prepare(args: argparse.Namespace) -> int:
    """CPU: precomputations, DocIDs and pairs, wheels, GGUF pieces; stage the carry folders."""
    from importlib.metadata import version

    from eval.runner import load_queries, obvious_sets
    from eval.splits import expected_corpus_hash, part_index, read_split
    from eval.systems import EvalContext
    from graft.config import config_to_dict
    from graft.index import Index
    from graft.progress import Reporter
    from training.base_models import SMOLLM2, load_tokenizer, smollm2_gguf_path
    from training.pairs import DistillConfig, build_pairs, naive_pairs

    t0 = time.perf_counter()
    split, work, stage = Path(args.split), Path(args.work), Path(args.stage)
    meta = read_split(split)
    # the in-corpus test part's leak-free index: the model learns a graph that holds none of the test
    # queries' citation links (their gold); the out-of-corpus queries are in no part's corpus
    index_dir = part_index(split, "test")
    if not (index_dir / "manifest.json").is_file():
        raise SystemExit(f"no index at {index_dir}; build the split's indexes with `graft eval build {split}`")
    index = Index.open(index_dir)
    if index.manifest.get("corpus_hash") != expected_corpus_hash(meta, "test"):
        raise SystemExit(f"{index_dir} was built from another corpus than {split}'s test part; rebuild it "
                         f"with `graft eval build {split}`")
    reporter = Reporter(quiet=args.quiet)
    # 1. what needs the encoder: out-of-corpus facets and rows, nearest-paper sets (kept in the split)
    ctx = EvalContext(index, split_dir=split)
    incorpus = load_queries(split, "incorpus", "test", None)
    ooc = load_queries(split, "ooc", "test", None)
    ctx.prepare_ooc(ooc, reporter)
    for suite, queries in (("incorpus", incorpus), ("ooc", ooc)):
        obvious_sets(split, suite, ctx, queries, reporter)
    print(f"out-of-corpus facets and nearest-paper sets: {len(ooc)} + {len(incorpus)} test queries "
          f"({time.perf_counter() - t0:.0f} s)", flush=True)
    # 2. DocIDs and coverage-aware pairs for SmolLM2's tokenizer, on a copy of the index
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    copy = work / "index"
    shutil.copytree(index_dir, copy, ignore=shutil.ignore_patterns("docids", "train", "model", "cache"))
    tokenizer = load_tokenizer(SMOLLM2)
    distill = DistillConfig(max_edges_per_source=args.max_edges)
    docids, pairs, report = build_pairs(copy, tokenizer, distill)
    n_naive = naive_pairs(Index.open(copy), docids).height
    print(f"pairs: {pairs.height:,} coverage-aware (papers as target {report['papers_share']:.2%}); "
          f"{n_naive:,} naive, built on the GPU from the same DocIDs", flush=True)
    # 3. the pieces: data archive, wheels, GGUF
    data = work / DATA_NAME
    archive = _data_archive(split, copy, data)
    pins = [f"{name}=={version(name)}" for name in WHEELS]
    wheels = [] if args.skip_wheels else download_wheels(work / "wheels", pins)
    gguf = smollm2_gguf_path()
    sizes = {DATA_NAME: data.stat().st_size, **{w.name: w.stat().st_size for w in wheels}}
    capacity = CARRY_LIMIT - CARRY_MARGIN
    plan = _pack(sizes, gguf.stat().st_size, capacity)
    # 4. stage
    shutil.rmtree(stage, ignore_errors=True)
    names = [chr(ord("a") + i) for i in range(len(plan))]
    pieces, parts = [], []
    sources = {DATA_NAME: data, **{w.name: w for w in wheels}}
    for name, folder in zip(names, plan):
        (stage / name).mkdir(parents=True)
        for piece in folder["pieces"]:
            shutil.copy2(sources[piece], stage / name / piece)
            pieces.append({"name": piece, "folder": name, "bytes": sizes[piece], "sha256": sha256_file(sources[piece]),
                           "kind": "data" if piece == DATA_NAME else "wheel"})
        if folder["gguf"]:
            parts.append((stage / name / GGUF_PART.format(len(parts)), folder["gguf"]))
            pieces.append({"name": parts[-1][0].name, "folder": name, "bytes": folder["gguf"], "kind": "gguf-part"})
    split_file(gguf, parts)
    record = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join(shlex.quote(a) for a in sys.argv),
        "folders": names,
        "pieces": pieces,
        "gguf": {"name": gguf.name, "bytes": gguf.stat().st_size, "sha256": sha256_file(gguf),
                 "parts": [p.name for p, _ in parts]},
        "index": {"part": "test", "corpus_hash": index.manifest.get("corpus_hash"),
                  "hidden_links": meta["incorpus_parts"]["test"].get("hidden_links")},
        "split": {"path": str(split), "corpus_hash": meta["corpus_hash"], "seed": meta["seed"],
                  "source": meta["source"], "counts": meta["counts"]},
        "queries": {"incorpus_test": len(incorpus), "ooc": len(ooc)},
        "distill": config_to_dict(distill),
        "pairs": {"coverage": pairs.height, "naive": n_naive, "coverage_report": {
            k: v for k, v in report.items() if k != "per_facet"}},
        "wheels": pins,
        "archive": archive,
    }
    (stage / names[-1] / STAGE_JSON).write_text(json.dumps(record, indent=2, default=str) + "\n")
    for name in names:
        total = folder_bytes(stage / name)
        print(f"{stage / name}: {total / 2**20:.1f} MiB  ({', '.join(sorted(p.name for p in (stage / name).iterdir()))})")
    print(f"staged in {time.perf_counter() - t0:.0f} s; rehearse with `python -m experiments.gpu.gpu_eval run --smoke "
          f"--stage {','.join(str(stage / n) for n in names)}` and make the device calls (experiments/gpu/README.md)")
    return 0


# ---- run (GPU; --smoke on the CPU) ---------------------------------------------------------------
class Run:
    """One run's report: written as JSON and Markdown into the output folder after every step, so a
    run cut short still returns what it measured."""

    def __init__(self, out: Path, args: argparse.Namespace) -> None:
        self.out = out
        self.started = time.monotonic()
        self.report: dict[str, Any] = {"args": vars(args), "env": None, "timings": {}, "train": {}, "limit": None,
                                       "calibration": {}, "tables": {}, "departures": [], "notes": [],
                                       "error": None}
        out.mkdir(parents=True, exist_ok=True)

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def step(self, name: str, t0: float) -> None:
        """Record a step's wall time and save."""
        self.report["timings"][name] = round(time.monotonic() - t0, 1)
        self.save()
        print(f"[{self.elapsed():6.1f} s] {name}: {self.report['timings'][name]:.1f} s", flush=True)

    def save(self) -> None:
        self.report["timings"]["total"] = round(self.elapsed(), 1)
        (self.out / "gpu_eval.json").write_text(json.dumps(self.report, indent=2, default=str) + "\n")
        (self.out / "gpu_eval.md").write_text(render(self.report))


def render(report: dict[str, Any]) -> str:
    """The report as Markdown: environment, timings, the two trainings, calibration, the tables."""
    env = report.get("env") or {}
    lines = [f"# GRAFT evaluation run ({env.get('gpu') or 'CPU smoke'})", ""]
    if env:
        lines += [f"torch {env.get('torch')}, transformers {env.get('transformers')}, accelerate "
                  f"{env.get('accelerate')}; bf16: {env.get('bf16')}", ""]
    if report["train"]:
        lines += ["## Training", "",
                  "| sampling | pairs | steps | epochs | batch | lr | tokens | first loss | final loss | train s | tokens/s |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for sampling, t in report["train"].items():
            r = t.get("result") or {}
            losses = r.get("losses") or []
            first = f"{losses[0][1]:.3f}" if losses else "n/a"
            final = f"{r['final_loss']:.3f}" if r.get("final_loss") is not None else "n/a"
            lines.append(f"| {sampling} | {t['pairs']:,} | {r.get('steps', 0):,} | {t['epochs']:.2f} | "
                         f"{t['batch_size']} | {t['lr']:g} | {r.get('tokens', 0):,} | {first} | {final} | "
                         f"{r.get('seconds', 0):.0f} | {r.get('tokens_per_s', 0):,.0f} |")
        lines.append("")
        for sampling, t in report["train"].items():
            m = t.get("memorisation")
            if m:
                lines += [f"Memorisation ({sampling}): of {m['pairs']} training pairs, the target DocID is the top "
                          f"beam for {m['target_is_top_beam']:.1%} and among the {m['beams']} beams for "
                          f"{m['target_in_beams']:.1%}; the top beams are {m['distinct_top_beams']} distinct DocIDs "
                          f"(one pair per source item: a model that reads its prompts gives nearly {m['pairs']})"
                          + (f"; {m['verdict']}" if m.get("verdict") else ""), ""]
    cal = report.get("calibration") or {}
    if cal:
        lines += ["## Calibration", "", "```", json.dumps(cal, indent=1, default=str), "```", ""]
    lim = report.get("limit")
    if lim:
        lines += [f"Queries per suite: the first {lim['per_suite']} by qid ({lim['incorpus_test']} of "
                  f"{lim['of']['incorpus_test']} in-corpus test, {lim['ooc']} of {lim['of']['ooc']} out-of-corpus)", ""]
    for note in report["departures"]:
        lines.append(f"- departure: {note}")
    for note in report["notes"]:
        lines.append(f"- {note}")
    if report["departures"] or report["notes"]:
        lines.append("")
    for suite, md in report["tables"].items():
        lines += [f"## {suite}", "", md.split("\n", 2)[2] if md.startswith("# ") else md, ""]
    if report.get("error"):
        lines += ["## Error", "", "```", report["error"], "```", ""]
    lines += [f"Timings (s): {json.dumps(report['timings'])}", ""]
    return "\n".join(lines)


def _stage_files(dirs: list[Path]) -> tuple[dict[str, Any], dict[str, Path]]:
    """stage.json and where each staged piece is (the first of `dirs` holding it).

    Raises:
        SystemExit: no stage.json, or pieces missing (a staging call to redo).
    """
    meta_path = next((d / STAGE_JSON for d in dirs if (d / STAGE_JSON).is_file()), None)
    if meta_path is None:
        raise SystemExit(f"no {STAGE_JSON} in {', '.join(map(str, dirs))}; carry the last staged folder")
    meta = json.loads(meta_path.read_text())
    where, missing = {}, []
    for piece in meta["pieces"]:
        found = next((d / piece["name"] for d in dirs if (d / piece["name"]).is_file()), None)
        if found is None or found.stat().st_size != piece["bytes"]:
            missing.append(f"{piece['name']} (folder {piece['folder']})")
        else:
            where[piece["name"]] = found
    if missing:
        print(f"staged pieces missing or truncated: {', '.join(missing)}; the machine went cold or a staging "
              f"call was skipped: redo the staging calls, then this one", flush=True)
        raise SystemExit(3)
    return meta, where


def _install_wheels(wheels: list[Path], site: Path) -> str:
    """Install the carried wheels into `site` unless their packages import already (then: a note).

    Raises:
        SystemExit: packages missing and no wheels staged.
        subprocess.CalledProcessError: pip failed.
    """
    missing = [m for m in CARRIED_MODULES if importlib.util.find_spec(m) is None]
    if not missing:
        return "polars, marisa-trie and gguf import already: wheels not installed"
    if not wheels:
        raise SystemExit(f"{', '.join(missing)} missing and no wheels staged; run prepare without --skip-wheels")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile", "--upgrade",
                    "--target", str(site), *map(str, wheels)], check=True)
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    return f"installed {', '.join(w.name for w in wheels)} into {site}"


def _calibrate_training(cov: Path, tokenizer: Any, base: str, batch: int, warmup: int, steps: int,
                        device: str, bf16: bool | None = None) -> dict[str, Any]:
    """Tokens/s of the trainer (`gpu_train.trainer_loop`) on a sample of the coverage-aware pairs."""
    import numpy as np

    from experiments.gpu.gpu_train import trainer_loop
    from training.base_models import resolve_base_model
    from training.data import encode_pairs_table, read_docid_tokens, read_pairs

    table = read_pairs(cov / "train" / "pairs.parquet")
    n = min(table.num_rows, batch * (warmup + steps))
    # every pair of randomly drawn source items, so that the sample's batches share prompts as
    # training's prompt-grouped batches do (a random sample of pairs would share almost none, and
    # packing would look no cheaper than one row per pair)
    rows: dict[tuple[str, str], list[int]] = {}
    for i, key in enumerate(zip(table.column("facet").to_pylist(), table.column("source_text").to_pylist())):
        rows.setdefault(key, []).append(i)
    groups = list(rows.values())
    picked: list[int] = []
    for g in np.random.default_rng(0).permutation(len(groups)):
        if len(picked) >= n:
            break
        picked.extend(groups[g])
    pick = np.sort(np.asarray(picked[:n]))
    data = encode_pairs_table(table.take(pick), tokenizer,
                              docid_tokens=read_docid_tokens(cov / "docids" / "docids.parquet"))
    model = resolve_base_model(base, seed=0)[0].to(device)
    tokens_per_s = trainer_loop(model, tokenizer, data, batch, warmup, steps, quiet=True, bf16=bf16)
    del model
    free()
    mean_len = data.n_tokens / len(data)
    return {"tokens_per_s": tokens_per_s, "mean_example_tokens": mean_len,
            "seconds_per_step": batch * mean_len / tokens_per_s, "batch": batch, "steps_timed": steps}


# What a training whose loss went NaN is retried with, in turn (each retry is recorded as a departure):
# attention by the reference MATH kernel only, then also float32 instead of bf16 autocast.
FALLBACKS: tuple[dict[str, Any], ...] = ({"sdpa": ("MATH",), "bf16": None}, {"sdpa": ("MATH",), "bf16": False})


def _retrying(what: str, fn: Any, args: argparse.Namespace, run: Run) -> Any:
    """fn(), retried under the next of `FALLBACKS` while it raises `TrainingDiverged`."""
    from graft import devices
    from training.trainer import TrainingDiverged

    while True:
        try:
            return fn()
        except TrainingDiverged as e:
            level = int(run.report.get("fallback_level") or 0)
            if level >= len(FALLBACKS):
                raise
            fb = FALLBACKS[level]
            devices.SDPA_BACKENDS = fb["sdpa"]
            args.bf16 = False if args.bf16 is False else fb["bf16"]  # --fp32 stays
            run.report["fallback_level"] = level + 1
            run.report["departures"].append(
                f"{what}: {e.args[0].split(';')[0]}; retried, and everything after it run, with attention "
                f"kernels {'/'.join(fb['sdpa'])}" + (" and float32 (no bf16 autocast)" if fb["bf16"] is False else ""))
            run.save()
            print(f"[{run.elapsed():6.1f} s] {what} diverged; retrying with {fb}", flush=True)


def _train(index: Path, sampling: str, base: str, steps: int, args: argparse.Namespace, run: Run,
           distill: dict[str, Any]) -> dict[str, Any]:
    """`train_index` for a fixed number of steps on the staged distillation settings (`distill`, the
    coverage-aware sampler's; the naive pairs take every edge); the report entry of that training."""
    from graft.progress import Reporter
    from training.pairs import DistillConfig
    from training.pipeline import train_index
    from training.trainer import TrainConfig

    config = TrainConfig(max_steps=steps, batch_size=args.batch_size, lr=args.lr, save_every_steps=0,
                         logging_steps=max(1, min(25, steps // 4)), bf16=args.bf16)
    summary = train_index(index, config, base_model=base, sampling=sampling, resume=False,
                          reporter=Reporter(quiet=args.quiet),
                          distill=DistillConfig.from_dict({**distill, "sampling": sampling}))
    out = summary.to_dict()
    out.update(epochs=steps * args.batch_size / max(1, summary.pairs), batch_size=args.batch_size, lr=args.lr)
    run.report["train"][sampling] = out
    return out


def _memorisation(index_dir: Path, args: argparse.Namespace, device: str) -> dict[str, Any]:
    """How far the trained model has learned its own pairs (`graft.check.prompt_check`): for a
    seeded sample of its training pairs with distinct source items, the share whose target DocID is
    the top beam (at most 1 / the source item's number of targets) or among the beams, and how many
    distinct DocIDs the top beams are — a model that has not yet learned to read its prompt decodes
    the same few for every source."""
    from graft.check import prompt_check
    from graft.index import Index
    from training.data import read_pairs

    gen = Index.open(index_dir).generative(device=device)
    check = prompt_check(gen.model, gen.tokenizer, gen.tries, read_pairs(index_dir / "train" / "pairs.parquet"),
                         pairs=args.memorisation_pairs, beams=args.beams, seed=1, batch_size=args.decode_batch)
    del gen
    free()
    return {**check.to_dict(), "verdict": check.verdict()}


def _decode_seconds_per_query(index_dir: Path, split: Path, args: argparse.Namespace, device: str) -> dict[str, Any]:
    """Seconds per in-corpus query of the coverage model's batched decoding (after a warm-up)."""
    from eval.runner import load_queries
    from graft.index import Index

    index = Index.open(index_dir)
    gen = index.generative(device=device)
    queries = load_queries(split, "incorpus", "test", None)
    specs = [(index.paper_facets(q.paper_id), {q.paper_id}) for q in queries[: args.calibration_queries + 2]]
    gen.facet_lists(specs[:2], args.beams, batch_size=args.decode_batch)  # warm-up
    sync()
    t0 = time.perf_counter()
    gen.facet_lists(specs[2:], args.beams, batch_size=args.decode_batch)
    sync()
    seconds = time.perf_counter() - t0
    del gen, index
    free()
    return {"queries": len(specs) - 2, "seconds": seconds, "seconds_per_query": seconds / max(1, len(specs) - 2)}


def _check_precomputed(split: Path, index_dir: Path) -> tuple[int, int]:
    """Check that `prepare`'s precomputations cover every test query, so that nothing in the run
    needs the sentence encoder or the item embeddings.

    Returns:
        (in-corpus test queries, out-of-corpus queries).
    Raises:
        SystemExit: a cache is missing, stale or incomplete (the message says to rerun prepare).
    """
    from eval.ooc_facets import cache_path, default_key, read_cache, text_sha
    from eval.runner import load_queries
    from graft.index import Index
    from graft.manifest import read_manifest
    from graft.store import read_json

    manifest = read_manifest(index_dir)
    queries = {s: load_queries(split, s, "test", None) for s in ("incorpus", "ooc")}
    for suite, qs in queries.items():
        path = split / "runs" / f"{suite}.obvious.json"
        near = read_json(path) if path.is_file() else {}
        if (near.get("key") or {}).get("corpus_hash") != manifest.get("corpus_hash") or \
                any(q.qid not in near.get("near", {}) for q in qs):
            raise SystemExit(f"{path} does not cover the {suite} test queries of this index; rerun prepare")
    cached = read_cache(cache_path(split), default_key(manifest), Index.open(index_dir).n) or {}
    stale = [q.qid for q in queries["ooc"]
             if q.qid not in cached or cached[q.qid].text_sha != text_sha(q.title, q.abstract)]
    if stale:
        raise SystemExit(f"{cache_path(split)} lacks {len(stale)} out-of-corpus queries (or was made for another "
                         f"index, extractor or encoder); rerun prepare")
    return len(queries["incorpus"]), len(queries["ooc"])


def _samplings(value: str) -> tuple[str, ...]:
    """--samplings: "coverage" or "coverage,naive" (the decoding calibration and every system but
    graft-naive use the coverage-aware model)."""
    names = tuple(dict.fromkeys(v.strip() for v in value.split(",") if v.strip()))
    if "coverage" not in names or not set(names) <= set(SAMPLINGS):
        raise argparse.ArgumentTypeError(f"{value!r}: coverage, or coverage,naive")
    return tuple(n for n in SAMPLINGS if n in names)


#: The suites' cost beyond the calibrated decoding, from the first H200 run: a query's decoding took
#: 0.076-0.082 s in the suites against 0.065 s calibrated (fusion, reading, the query's own items),
#: and the teacher rows, the other fusions and the attribution checks ~20 s in all.
DECODE_FACTOR, SUITES_FIXED_S = 1.3, 20.0


def _choose_limit(per_query: float, n_incorpus: int, n_ooc: int, seconds: float, models: int = 2) -> int:
    """The most queries per suite (first N by qid) whose decoding by `models` models, with
    `DECODE_FACTOR` and `SUITES_FIXED_S` for the rest of the suites, fits `seconds` (at least 1)."""
    def cost(n: int) -> float:
        return DECODE_FACTOR * per_query * models * (min(n, n_incorpus) + min(n, n_ooc)) + SUITES_FIXED_S

    top = max(n_incorpus, n_ooc)
    if cost(top) <= seconds:
        return top
    lo, hi = 1, top
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if cost(mid) <= seconds else (lo, mid - 1)
    return lo


def _bundle(run: Run, work: Path, split: Path, name: str) -> None:
    """results.tar.gz: the JSON tables, the GRAFT systems' runs (TREC, credits, metadata) and the
    trained indexes' manifests; without the credits if it would pass `BUNDLE_LIMIT` (a file that
    large does not come back from the device machine)."""
    runs = sorted(p for p in (split / "runs").glob("*") if p.is_file() and p.name.split(".")[1] in GRAFT_SYSTEMS)
    base = sorted((work / "results").glob(f"eval_*_{name}.json"))
    base += [p for p in (work / "index-coverage" / "manifest.json", work / "index-naive" / "manifest.json")
             if p.is_file()]
    tmp = run.out / "results.tar.gz.tmp"
    for keep_credits in (True, False):
        with tarfile.open(tmp, "w:gz") as tar:
            for p in base + [r for r in runs if keep_credits or not r.name.endswith(".credits.jsonl")]:
                arc = f"{p.parent.name}/{p.name}" if p.name == "manifest.json" else \
                    f"runs/{p.name}" if p.parent.name == "runs" else f"tables/{p.name}"
                tar.add(p, arcname=arc)
        if tmp.stat().st_size <= BUNDLE_LIMIT:
            break
        note = "results.tar.gz holds no .credits.jsonl files: with them it would pass 15 MiB"
        if note not in run.report["notes"]:
            run.report["notes"].append(note)
    tmp.replace(run.out / "results.tar.gz")


def run_eval(args: argparse.Namespace) -> int:
    """The GPU run (module docstring); --smoke: the same steps on the CPU at toy size."""
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out or os.environ.get("OUT") or "gpu-eval-out")
    run = Run(out, args)
    try:
        _run_steps(args, run)
    except BaseException as exc:  # record and save, then fail: the tables written so far come back
        run.report["error"] = "".join(traceback.format_exception(exc))[-4000:]
        run.save()
        raise
    run.save()
    print((out / "gpu_eval.md").read_text(), flush=True)
    return 0


def _run_steps(args: argparse.Namespace, run: Run) -> None:
    import torch

    # Nothing imported before the wheels step may need polars, marisa-trie or gguf: the device image
    # lacks them until the carried wheels are installed (eval.runner comes after that step).
    from training.base_models import GGUF_ENV, SMOLLM2, TINY

    cuda = torch.cuda.is_available()
    if not cuda and not args.smoke:
        raise SystemExit("no CUDA GPU here; use --smoke for the CPU rehearsal")
    device = "cuda" if cuda and not args.smoke else "cpu"
    base = TINY if args.smoke else SMOLLM2
    deadline = run.started + args.budget_s
    work = Path(args.work)
    run.report["env"] = env_info()

    t = time.monotonic()
    dirs = [Path(d) for d in args.stage.split(",") if d]
    meta, where = _stage_files(dirs)
    distill = meta.get("distill") or {}  # stages made before N was a setting used the default N = 10
    run.report["stage"] = {k: meta.get(k) for k in ("created", "split", "queries", "distill", "pairs", "wheels")}
    n_edges = int(distill.get("max_edges_per_source", 10))
    if n_edges != 10:
        run.report["departures"].append(
            f"coverage-aware pairs sample N = {n_edges} out-edges per source paper and facet (GRAFT: 10); "
            "the memorisation ceilings of both are in docs/results/distill_ceiling_*.md")
    run.report["notes"].append(_install_wheels([where[p["name"]] for p in meta["pieces"] if p["kind"] == "wheel"],
                                               Path(args.site)))
    run.step("wheels", t)

    t = time.monotonic()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    g = meta["gguf"]
    gguf = join_parts([where[p] for p in g["parts"]], work / g["name"], g["sha256"])
    os.environ[GGUF_ENV] = str(gguf)
    with tarfile.open(where[DATA_NAME]) as tar:
        tar.extractall(work, filter="data")
    cov, naive, split = work / "index-coverage", work / "index-naive", work / "split"
    (work / "index").rename(cov)
    _unread_item_embeddings(cov)
    if "naive" in args.samplings:  # its own index: the naive pairs and model go there
        shutil.copytree(cov, naive, ignore=shutil.ignore_patterns("train", "model"))
    run.step("unpack", t)

    t = time.monotonic()
    from eval.runner import RunOptions, run_suites
    from training.base_models import load_tokenizer

    tokenizer = load_tokenizer(base)  # SmolLM2: converts the GGUF once (~20 s)
    run.step("tokenizer (GGUF conversion)", t)

    # ---- training: steps calibrated on the GPU, the same for both models ----
    if args.train_steps:
        steps = args.train_steps
    else:
        t = time.monotonic()
        cal = _retrying("training calibration", lambda: _calibrate_training(
            cov, tokenizer, base, args.batch_size, args.calibration_warmup, args.calibration_steps, device,
            args.bf16), args, run)
        run.report["calibration"]["training"] = cal
        steps = max(1, int(args.train_budget_s / len(args.samplings) / cal["seconds_per_step"]))
        run.step("training calibration", t)
    pairs_cov = meta["pairs"]["coverage"]
    cap = max(1, int(args.max_epochs * pairs_cov / args.batch_size))
    if steps > cap:
        steps = cap
        run.report["notes"].append(f"steps capped at {args.max_epochs:g} epochs of the coverage-aware pairs")
    run.report["departures"].append(
        f"effective batch {args.batch_size} with lr {args.lr:g} (reference: 16 and 5e-5)"
        + ("" if args.smoke else ", so that SmolLM2's small kernels fill the GPU and the run fits its budget"))
    per_step = run.report["calibration"].get("training", {}).get("seconds_per_step")

    def steps_now(planned: int, what: str) -> int:
        """`planned`, or after a diverged try (`_retrying`) what the time left allows before the
        evaluation's minimum share, at the calibrated speed."""
        if not run.report.get("fallback_level") or not per_step:
            return planned
        left = deadline - time.monotonic() - args.reserve_s - args.min_eval_s - 20.0  # tokenising, saving
        fits = max(1, int(left / per_step))
        if fits < planned:
            run.report["departures"].append(f"{what} retried for {fits} steps instead of {planned}: what the time "
                                            "left after the diverged try allowed")
        return min(planned, fits)

    t = time.monotonic()
    cov_train = _retrying("coverage training", lambda: _train(cov, "coverage", base,
                                                              steps_now(steps, "coverage training"), args, run,
                                                              distill), args, run)
    steps = int(cov_train["result"]["steps"])
    run.step("train coverage", t)
    t = time.monotonic()
    try:  # a diagnostic: whatever happens in it, the evaluation goes on
        run.report["train"]["coverage"]["memorisation"] = _memorisation(cov, args, device)
    except Exception as exc:  # noqa: BLE001 - recorded, not raised
        run.report["notes"].append(f"memorisation check failed ({type(exc).__name__}: {exc})")
        free()
    run.step("memorisation check", t)
    naive_steps, naive_train = 0, None
    if "naive" in args.samplings:
        # the naive model gets the same steps unless that would eat the evaluation's minimum share
        fit_s = float(cov_train["result"]["seconds"]) or 1e-9
        # tokenising, model load and save; the naive pairs take ~1.7x as long to tokenise
        overhead = 1.5 * max(0.0, run.report["timings"]["train coverage"] - fit_s)
        available = deadline - time.monotonic() - args.reserve_s - args.min_eval_s
        naive_steps = steps
        if not args.train_steps and overhead + fit_s > available:
            naive_steps = max(1, int(steps * max(0.0, available - overhead) / fit_s))
            run.report["departures"].append(
                f"naive pairs trained {naive_steps} steps instead of {steps}: the coverage-aware training took "
                f"{fit_s:.0f} s and {available:.0f} s were left before the evaluation's minimum share")
        t = time.monotonic()
        naive_train = _retrying("naive training", lambda: _train(
            naive, "naive", base, steps_now(naive_steps, "naive training"), args, run, distill), args, run)
        naive_steps = int(naive_train["result"]["steps"])
        run.step("train naive", t)
    parts = [f"{steps} steps of {args.batch_size} examples on the coverage-aware pairs ({cov_train['epochs']:.2f} "
             f"epochs of {cov_train['pairs']:,})"
             + (f" and {naive_steps} on the naive pairs ({naive_train['epochs']:.2f} epochs of "
                f"{naive_train['pairs']:,})" if naive_train else ""),
             "reference: 2 epochs each" if naive_train else "reference: 2 epochs"]
    if naive_train and naive_steps == steps:
        parts.append("the same steps for both samplings (equal compute)")
    parts.append(f"capped at {args.max_epochs:g} epochs" if steps == cap else "sized to the time budget")
    if not naive_train:
        parts.append("no naive model in this run (--samplings coverage): graft-naive is not measured")
    run.report["departures"].append("; ".join(parts))

    # ---- evaluation: a query limit calibrated on the GPU ----
    n_in, n_ooc = _check_precomputed(split, cov)
    if args.limit:
        limit = args.limit
    else:
        t = time.monotonic()
        dec = _decode_seconds_per_query(cov, split, args, device)
        run.report["calibration"]["decoding"] = dec
        run.step("decoding calibration", t)
        left = deadline - time.monotonic() - args.reserve_s
        limit = _choose_limit(dec["seconds_per_query"], n_in, n_ooc, left, models=len(args.samplings))
        run.report["calibration"]["eval_seconds_available"] = round(left, 1)
        run.report["calibration"]["limit_fitted"] = limit
        if args.max_queries:
            limit = min(limit, args.max_queries)
    full = limit >= max(n_in, n_ooc)
    run.report["limit"] = {"per_suite": limit, "incorpus_test": min(limit, n_in), "ooc": min(limit, n_ooc),
                           "of": {"incorpus_test": n_in, "ooc": n_ooc}}
    # on fewer queries than the CPU tables, the teachers (teacher-cite: the comparison for graft-cite) are
    # measured again on the same ones
    systems = [s for s in GRAFT_SYSTEMS if s != "graft-naive" or naive_train] + ([] if full else ["teacher", "teacher-cite"])
    if not full:
        run.report["departures"].append(
            f"the first {limit} queries of each suite by qid ({min(limit, n_in)} of {n_in} in-corpus test, "
            f"{min(limit, n_ooc)} of {n_ooc} out-of-corpus), sized to the time budget; the teacher rows are "
            f"measured on the same queries for comparison")
    gpu = run.report["env"].get("gpu") or "CPU"
    label = (f"{gpu}: {'tiny model' if args.smoke else 'SmolLM2-135M'} trained {steps} steps x batch "
             f"{args.batch_size} on coverage-aware pairs ({cov_train['epochs']:.2f} epochs)"
             + (f" and {naive_steps} on naive pairs ({naive_train['epochs']:.2f} epochs)" if naive_train else "")
             + f"; {args.beams} beams; "
             + (f"first {limit} queries per suite by qid" if not full else "all test queries"))
    options = RunOptions(systems=systems, index_dir=cov, naive_index=naive if naive_train else None, part="test",
                         limit=None if full else limit, beams=args.beams, device=device,
                         results_dir=work / "results", name=args.name, label=label,
                         decode_batch=args.decode_batch,
                         time_budget_s=max(1.0, deadline - time.monotonic() - args.reserve_s / 2))

    suite_started = time.monotonic()

    def on_table(table: dict[str, Any]) -> None:
        nonlocal suite_started
        md = Path(table["files"][0])
        shutil.copy2(md, run.out / md.name)
        run.report["tables"][table["suite"]] = md.read_text()
        run.step(f"suite {table['suite']}", suite_started)
        _bundle(run, work, split, args.name)
        suite_started = time.monotonic()

    from graft.progress import Reporter

    command = "python -m experiments.gpu.gpu_eval " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    run_suites(split, list(SUITES), options, reporter=Reporter(quiet=args.quiet), command=command, on_table=on_table)


def main(argv: list[str] | None = None) -> int:
    bootstrap()
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("prepare", help="CPU: precompute, build DocIDs + pairs, stage .gpu/eval/{a,b,...}")
    pr.add_argument("--split", required=True, help="split directory with a built index (graft eval prepare + build)")
    pr.add_argument("--work", default="/tmp/graft-gpu-eval-prep", help="scratch folder (index copy, wheels, archive)")
    pr.add_argument("--stage", default=str(REPO / ".gpu" / "eval"))
    pr.add_argument("--skip-wheels", action="store_true",
                    help="stage no wheels (a rehearsal where polars, marisa-trie and gguf import already)")
    pr.add_argument("--max-edges", type=int, default=10,
                    help="N of the coverage-aware pairs (GRAFT: 10); docs/results/distill_ceiling_*.md")
    pr.add_argument("--quiet", action="store_true")
    r = sub.add_parser("run", help="GPU: train coverage + naive models, evaluate graft, graft-rrf, graft-walk, graft-naive")
    r.add_argument("--stage", required=True, help="comma-separated folders holding the staged pieces "
                   "(the machine's copy folder and the carried last folder)")
    r.add_argument("--out", default=None, help="output folder (default $OUT)")
    r.add_argument("--work", default="/tmp/graft-gpu-eval", help="scratch folder (indexes, models, runs)")
    r.add_argument("--site", default="/tmp/site", help="where the carried wheels are installed")
    r.add_argument("--smoke", action="store_true", help="CPU rehearsal: tiny model, a few steps and queries")
    r.add_argument("--budget-s", type=float, default=450.0, help="the whole run, from the script's start")
    r.add_argument("--train-budget-s", type=float, default=200.0, help="the trainings together (calibrated steps)")
    r.add_argument("--samplings", type=_samplings, default=SAMPLINGS,
                   help="models to train: coverage,naive (default; equal steps) or coverage (all of the training "
                        "budget to the coverage-aware model; graft-naive is not measured)")
    r.add_argument("--reserve-s", type=float, default=25.0, help="kept for writing after the last suite")
    r.add_argument("--min-eval-s", type=float, default=100.0,
                   help="the naive model's steps are cut if its training would leave the evaluation less")
    r.add_argument("--train-steps", type=int, default=None, help="steps per model (skips the calibration)")
    r.add_argument("--max-epochs", type=float, default=6.0, help="cap on steps, in epochs of the coverage pairs")
    r.add_argument("--batch-size", type=int, default=256)
    r.add_argument("--lr", type=float, default=1e-3,
                   help="peak rate: the CPU recipe's (docs/results/train_recipe_cs768-10core.md)")
    r.add_argument("--fp32", dest="bf16", action="store_const", const=False, default=None,
                   help="train in float32 (default: bf16 autocast where the GPU has it)")
    r.add_argument("--calibration-warmup", type=int, default=3)
    r.add_argument("--calibration-steps", type=int, default=8)
    r.add_argument("--calibration-queries", type=int, default=32)
    r.add_argument("--limit", type=int, default=None, help="queries per suite (skips the calibration)")
    r.add_argument("--max-queries", type=int, default=None, help="cap on the calibrated queries per suite")
    r.add_argument("--beams", type=int, default=20)
    r.add_argument("--memorisation-pairs", type=int, default=256,
                   help="training pairs decoded after the coverage-aware training (is the target among the beams?)")
    r.add_argument("--decode-batch", type=int, default=128, help="facet items per generate call")
    r.add_argument("--name", default="cs768_graft", help="table names: eval_{suite}_{name}.md")
    r.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's; smoke: 1)")
    r.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    if args.cmd == "prepare":
        return prepare(args)
    if args.smoke:  # toy sizes unless given: the same code path in about a minute
        args.batch_size = 8 if args.batch_size == 256 else args.batch_size
        args.calibration_warmup, args.calibration_steps = 1, 2
        args.calibration_queries = min(args.calibration_queries, 2)
        args.train_budget_s = min(args.train_budget_s, 2.0)
        args.beams = 2 if args.beams == 20 else args.beams
        args.decode_batch = 8 if args.decode_batch == 128 else args.decode_batch
        args.max_queries = args.max_queries or 3
        args.memorisation_pairs = min(args.memorisation_pairs, 16)
        args.threads = args.threads or 1
        args.budget_s = max(args.budget_s, 600.0)
    return run_eval(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
