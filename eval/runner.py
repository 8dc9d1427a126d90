"""`graft eval run`: run systems on a split's queries, keep their TREC runs, score them, write tables.

Suites:

- `incorpus`: the split's in-corpus queries (`--part test` by default): Recall@20/@50 and the
  non-obvious share of correct retrievals at 20 (`eval.metrics`).
- `ooc`: the out-of-corpus queries (title + abstract of papers removed before the build), same metrics.
- `attribution`: facet-attribution precision of the attributed systems' top-20 hits, in corpus and
  out of corpus, per facet, overall and by evidence hops (a credit is supported when the facet graph
  holds an edge between query and hit).
- `coverage`: share of papers and DocIDs learnable under naive vs coverage-aware distillation pairs.
- `survey`: delegated to `eval.survey_suite.survey_suite` (imported when asked for); `--part` picks
  the survey hold-outs too (dev for tuning the writer, test for reporting).

Every system's answers are written as it finishes to `SPLITDIR/runs/{suite}.{system}.trec` (the
in-corpus dev part's to `incorpus-dev.{system}.trec`; plus
`.credits.jsonl` with the facet credits and `.json` with what produced it), and reused by later
runs over the same queries and index unless `force`. A `limit` run reads a stored run of more
queries, or writes `{suite}-firstN.*`; a run over another index than `SPLITDIR/index` writes
`{suite}@{index_key}.*` (`index_key`): neither replaces the run a table was computed from.
Metrics are computed from the run files and the split's qrels, so any run can be re-scored
(`score_run`, `graft eval score`). Tables go to
`RESULTS/eval_{suite}_{name}.md` and `.json` (the dev part's to `eval_{suite}-dev_{name}.*`), with
the command, hashes, seed, date, versions and query counts.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib
import importlib.metadata
import json
import re
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from eval.metrics import KS, OBVIOUS_M, attribution_precision, mean_recall, non_obvious_share
from eval.splits import expected_corpus_hash, part_index, read_queries, read_split
from eval.systems import (
    ATTRIBUTED,
    SURVEY_SYSTEMS,
    SYSTEMS,
    EvalContext,
    EvalQuery,
    NotApplicable,
    SystemRun,
    run_system,
)
from eval.trec import read_qrels, read_run, write_run
from graft.config import type_problems
from graft.errors import GraftError
from graft.facets import FACETS
from graft.index import Index
from graft.jsonio import loads
from graft.manifest import library_versions, now_iso
from graft.progress import Reporter
from graft.store import atomic_path, folder_problem, read_json, write_json

SUITES = ("incorpus", "ooc", "attribution", "coverage", "survey")
REPO = Path(__file__).resolve().parents[1]
#: Cut-off of the attribution and non-obvious measures.
ATTRIBUTION_K = 20


@dataclass
class RunOptions:
    """Options of one `graft eval run`."""

    systems: list[str] = field(default_factory=lambda: ["bm25", "dense", "teacher"])
    index_dir: Path | None = None  # default SPLITDIR/index
    part: str = "test"  # in-corpus queries and survey hold-outs: dev or test
    limit: int | None = None  # first N queries of each suite (by qid), for quick checks
    force: bool = False  # recompute runs even where a matching run file exists
    naive_index: Path | None = None  # index holding a model trained on naive pairs (graft-naive)
    base_model: str = "smollm2-135m"  # tokenizer of the coverage suite's DocIDs
    beams: int = 20  # beams per facet item (generative systems)
    device: str = "cpu"
    results_dir: Path | None = None  # tables' folder; default SPLITDIR/results (the repository's: docs/results)
    name: str | None = None  # corpus name in table file names (default: from the split's source)
    label: str | None = None  # extra label printed on every table, e.g. "pipeline check"
    decode_batch: int = 64  # facet items per generate call of the generative systems (across queries)
    # seconds from the start of `run_suites` after which generative systems stop (their row n/a, with a note)
    time_budget_s: float | None = None
    judge: Any = None  # survey suite: an LLMConfig for the claim judge (None = the offline proxy checker)

    def __post_init__(self) -> None:
        if isinstance(self.systems, str):  # would be read one letter at a time
            raise GraftError(f"systems= takes a list of system names, not one string: systems={[self.systems]!r}")
        problems = type_problems(self)
        if problems:
            raise GraftError("invalid run options: " + "; ".join(problems))
        for name in ("index_dir", "naive_index", "results_dir"):  # a str path works as a Path does
            if getattr(self, name) is not None:
                setattr(self, name, Path(getattr(self, name)))
        self.systems = list(dict.fromkeys(self.systems))  # a system named twice runs (and shows) once
        if self.part not in ("dev", "test"):
            raise GraftError(f"unknown part {self.part!r}; allowed: dev, test")
        if self.limit is not None and self.limit < 1:
            raise GraftError(f"--limit {self.limit} must be >= 1")
        if self.time_budget_s is not None and self.time_budget_s < 0:
            raise GraftError(f"time_budget_s={self.time_budget_s} must be >= 0 seconds (or None: no budget)")
        if self.decode_batch < 1:
            raise GraftError(f"decode_batch {self.decode_batch} must be >= 1")
        if self.beams < 1:
            raise GraftError(f"--beams {self.beams} must be >= 1")
        from graft.devices import resolve_device

        self.device = resolve_device(self.device)  # an unknown name or an absent GPU, before any work


def corpus_name(meta: dict[str, Any]) -> str:
    """A short name of the split's source corpus: `cs768` for `.../cs768/papers.jsonl.gz`."""
    src = Path(str(meta.get("source", "corpus")))
    stem = src.name.split(".")[0] or "corpus"
    return src.parent.name if stem in ("papers", "corpus") and src.parent.name else stem


def _versions() -> dict[str, str]:
    out = library_versions()
    try:
        out["bm25s"] = importlib.metadata.version("bm25s")
    except importlib.metadata.PackageNotFoundError:
        pass
    return out


def _sha(items: list[str]) -> str:
    return hashlib.sha256("\n".join(items).encode()).hexdigest()[:16]


def _model_stamp(index: Index | None) -> dict[str, Any] | None:
    """What identifies a trained model: base model and when training finished (None: no model)."""
    from graft.manifest import has_model

    if index is None or not has_model(index.path):
        return None
    train = index.manifest.get("stages", {}).get("train", {})
    base = (train.get("config") or {}).get("base_model") or {}
    return {"index": str(index.path), "base_model": base.get("name"), "sampling": (train.get("config") or {}).get("sampling"),
            "finished_at": train.get("finished_at"), "steps": (train.get("counts") or {}).get("steps")}


def _check_note(index: Index) -> str:
    """The model's prompt check (`graft.check`, recorded by `graft train`) for a table note: a
    model that decodes the same few DocIDs whatever the query is named as such."""
    from graft.check import PromptCheck

    check = PromptCheck.from_dict((index.manifest.get("stages", {}).get("train") or {}).get("check"))
    if check is None:
        return ""
    return (f"; prompt check: {check.distinct_top_beams} distinct top DocIDs of {check.pairs} training prompts, "
            f"taught target among {check.beams} beams for {check.target_in_beams:.0%}: {check.verdict()}")


def _graph_stamp(index: Index | None, system: str) -> dict[str, Any] | None:
    """What of the index's build a system's run depends on beyond the corpus: nothing for `bm25`,
    the sentence encoder for `dense` and `hybrid`, and for every other system the build (its settings and when
    it finished), so a rebuilt graph over the same corpus is never scored with an older graph's runs."""
    from graft.encoder import model_name

    if index is None or system == "bm25":
        return None
    build = index.manifest.get("stages", {}).get("build", {})
    if system in ("dense", "hybrid"):
        return {"encoder": model_name((build.get("config") or {}).get("embedding_model"))}
    return {"config": build.get("config"), "finished_at": build.get("finished_at")}


def build_settings(index: Index) -> dict[str, Any]:
    """The build settings that shape an index's graphs (for table headers)."""
    from graphbuild.build import BuildConfig

    config = BuildConfig.from_manifest(index.manifest)
    return {**{k: getattr(config, k) for k in ("extractor", "facet_scorer", "top_k", "alpha", "beta", "title_weight",
                                               "item_context", "citation_rescale", "embedding_model")},
            # what ran the encoder (indexes built before the choice existed ran torch)
            "encoder_backend": index.manifest.get("embedding", {}).get("backend", "torch")}


# ---- queries and runs ---------------------------------------------------------------------------
def load_queries(split_dir: Path, suite: str, part: str, limit: int | None) -> list[EvalQuery]:
    """The queries of the `incorpus` (one part) or `ooc` suite, the first `limit` by qid."""
    if suite == "incorpus":
        rows = read_queries(split_dir, "incorpus", part=part)
        out = [EvalQuery(r["qid"], r["paper_id"], True) for r in rows]
    else:
        rows = read_queries(split_dir, "ooc")
        out = [EvalQuery(r["qid"], r["paper_id"], False, r.get("title") or "", r.get("abstract") or "") for r in rows]
    out.sort(key=lambda q: q.qid)
    return out[:limit] if limit else out


def run_paths(split_dir: Path, suite: str, system: str, part: str = "test", *, first: int | None = None,
              index_key: str | None = None) -> tuple[Path, Path, Path]:
    """(TREC run, facet credits JSONL, run metadata JSON) of one suite and system: the in-corpus
    dev part's are `incorpus-dev.*`, beside the test part's `incorpus.*` (as the survey suite's
    `survey-dev` beside `survey`), so that running one part keeps the other's runs. A run of the
    first N queries only is `{suite}-firstN.*`, and a run over another index than `SPLITDIR/index`
    `{suite}@{index_key}.*` (`index_key`), so that neither replaces the run a full table was
    computed from."""
    runs = Path(split_dir) / "runs"
    stem = f"{suite}-dev" if suite == "incorpus" and part == "dev" else suite
    stem += (f"-first{first}" if first else "") + (f"@{index_key}" if index_key else "")
    return runs / f"{stem}.{system}.trec", runs / f"{stem}.{system}.credits.jsonl", runs / f"{stem}.{system}.json"


def index_key(split_dir: Path, index_dir: Path, default: Path | None = None) -> str | None:
    """How run files name an index other than the suite's own (`default`: `SPLITDIR/index`, or an
    in-corpus part's `SPLITDIR/incorpus/{part}/index`): its folder's name (letters, digits, `_` and
    `-`) and a hash of its absolute path; None for the suite's own."""
    where = Path(index_dir).resolve()
    if where == Path(default if default is not None else Path(split_dir) / "index").resolve():
        return None
    name = re.sub(r"[^A-Za-z0-9_-]+", "_", where.name).strip("_") or "index"
    return f"{name}-{hashlib.sha256(str(where).encode()).hexdigest()[:6]}"


def suite_part(suite: str, part: str) -> str | None:
    """The in-corpus part whose leak-free index a suite's queries are answered from (None: the
    split's own index, for out-of-corpus, survey and coverage)."""
    return part if suite == "incorpus" else None


def default_index(split_dir: Path, suite: str, part: str) -> Path:
    """The index a suite runs on unless `--index` says otherwise: an in-corpus part's leak-free
    index for `incorpus`, `SPLITDIR/index` for the others."""
    which = suite_part(suite, part)
    return part_index(split_dir, which) if which else Path(split_dir) / "index"


def _write_credits(path: Path, credits: dict[str, list[tuple[str, dict[str, int]]]],
                   labels: dict[str, list[list[str]]]) -> None:
    """One JSON line per query: {"qid", "hits": [[paper_id, {facet: hops}, [label facets]], ...]}."""
    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps({"qid": q, "hits": [[d, f, lab] for (d, f), lab in zip(credits[q], labels[q])]})
                               + "\n" for q in sorted(credits)), encoding="utf-8")


def _credit_rows(path: str | Path) -> dict[str, list[list[Any]]]:
    out = {}
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = loads(line, str(path))
            out[row["qid"]] = row["hits"]
    return out


def read_credits(path: str | Path) -> dict[str, list[tuple[str, dict[str, int]]]]:
    """qid -> [(paper_id, {facet: hops})] in rank order, from a `.credits.jsonl` file."""
    return {q: [(h[0], {f: int(n) for f, n in h[1].items()}) for h in hits] for q, hits in _credit_rows(path).items()}


def read_labels(path: str | Path) -> dict[str, list[list[str]]] | None:
    """qid -> per hit, the facets its label names, from a `.credits.jsonl` file; None for a file
    written before labels were recorded."""
    rows = _credit_rows(path)
    if any(len(h) < 3 for hits in rows.values() for h in hits):
        return None
    return {q: [[str(f) for f in h[2]] for h in hits] for q, hits in rows.items()}


#: Systems that answer out-of-corpus queries from the text alone, not from the cached facets and rows.
TEXT_SYSTEMS = ("bm25", "dense", "hybrid", "citation")


def _ooc_stamp(ctx: EvalContext) -> dict[str, Any]:
    """What out-of-corpus runs from the cached facets and rows depend on (`eval.ooc_facets`)."""
    from eval.ooc_facets import CACHE_VERSION

    return {"key": ctx.ooc_key, "version": CACHE_VERSION}


def _feedback_stamp() -> int:
    """R of the feedback pass the `teacher-fb` runs walk with (`graft.external.FEEDBACK`)."""
    from graft.external import FEEDBACK

    return FEEDBACK


def _citation_stamp() -> dict[str, float]:
    """The citation channel the `-cite` runs fuse (`graft.fusion`: W, R, and the facet fusion's
    first results kept first)."""
    from graft.fusion import CITATION_FIRST, CITATION_KEEP, CITATION_WEIGHT

    return {"weight": CITATION_WEIGHT, "first": CITATION_FIRST, "keep": CITATION_KEEP}


def _text_stamp() -> dict[str, float]:
    """The text channel the `graft-text` runs fuse (`graft.fusion.TEXT_WEIGHT`; its neighbours come
    from the out-of-corpus cache, whose key the `ooc_rows` stamp holds)."""
    from graft.fusion import TEXT_WEIGHT

    return {"weight": TEXT_WEIGHT}


def obtain_run(split_dir: Path, suite: str, system: str, ctx: EvalContext, queries: list[EvalQuery],
               options: RunOptions, reporter: Reporter) -> tuple[SystemRun, dict[str, Any]]:
    """A system's run over the queries: reused from `SPLITDIR/runs` when the same queries, index
    and model produced it (and not `force`), else computed and written at once.

    Raises:
        NotApplicable: the system does not apply to these queries.
    """
    index = ctx.naive_index if system == "graft-naive" else ctx.index
    want = {"suite": suite, "system": system, "queries": len(queries), "qids_sha": _sha([q.qid for q in queries]),
            "corpus_hash": ctx.index.manifest.get("corpus_hash"), "build": _graph_stamp(index, system),
            "model": _model_stamp(index) if system.startswith("graft") else None,
            "ooc_rows": _ooc_stamp(ctx) if suite == "ooc" and system not in TEXT_SYSTEMS else None,
            "feedback": _feedback_stamp() if system == "teacher-fb" else None,
            "citation": _citation_stamp() if system in ("teacher-cite", "graft-cite", "graft-text") else None,
            "text": _text_stamp() if system == "graft-text" else None}
    # the run of every query of the part, or of the first N where the limit left some out; named by
    # the index where its answers depend on it (not bm25's), so no other run replaces it
    key = (index_key(split_dir, index.path, default_index(split_dir, suite, options.part))
           if (want["build"] or want["model"]) else None)
    first = len(queries) if _limited(split_dir, suite, options, queries) else None
    full = run_paths(split_dir, suite, system, options.part, index_key=key)
    trec, credits_path, meta_path = run_paths(split_dir, suite, system, options.part, first=first, index_key=key)
    for stored in dict.fromkeys([full, (trec, credits_path, meta_path)]) if not options.force else ():
        found = _stored_run(stored, want, queries)
        if found is not None:
            return found
    t0 = time.perf_counter()
    run = run_system(system, ctx, queries, reporter)
    seconds = time.perf_counter() - t0
    write_run(trec, run.run, tag=system)
    if run.credits is not None:
        _write_credits(credits_path, run.credits, run.labels)
    meta = {**want, "seconds": round(seconds, 2), "created": now_iso(), "qids": [q.qid for q in queries],
            "trec_sha": _file_sha(trec)}
    write_json(meta_path, meta)
    # scored as read back from the file (its score precision and tie order), as a reused run is
    return SystemRun(read_run(trec), credits=run.credits, labels=run.labels), {**meta, "run_file": str(trec)}


def _stored_run(paths: tuple[Path, Path, Path], want: dict[str, Any],
                queries: list[EvalQuery]) -> tuple[SystemRun, dict[str, Any]] | None:
    """The run stored at `paths` with its record (`run_file` added), if it serves these queries
    (`_served_subset`); None when it must be computed (absent, made otherwise, or damaged)."""
    trec, credits_path, meta_path = paths
    old = _cached_json(meta_path) if trec.is_file() else None
    try:
        subset = _served_subset(old, want, trec, queries) if old is not None else None
    except (TypeError, ValueError):  # a damaged record: the run is computed again
        subset = None
    if subset is None:
        return None
    try:
        run = SystemRun(read_run(trec))
        if credits_path.is_file():
            run.credits = read_credits(credits_path)
            run.labels = read_labels(credits_path)
            if run.labels is None:  # written before labels were recorded: computed again
                return None
    except (GraftError, ValueError, KeyError, TypeError):  # a damaged stored run is computed again
        return None
    return run, {**subset, "run_file": str(trec)}


def _cached_json(path: Path) -> dict[str, Any] | None:
    """A JSON object stored under `SPLITDIR/runs` (a cache), or None when it is absent or damaged:
    what it describes is then computed again."""
    try:
        value = read_json(path)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _file_sha(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def _served_subset(old: dict[str, Any], want: dict[str, Any], trec: Path,
                   queries: list[EvalQuery]) -> dict[str, Any] | None:
    """The stored run's metadata if it serves these queries: made for exactly them, or for more of
    them with everything else the same (a `--limit` run reads the full run instead of replacing it;
    its seconds prorated, `subset_of` its query count). None: the run must be computed."""
    if any(old.get(k) != v for k, v in want.items() if k not in ("queries", "qids_sha")):
        return None
    if "trec_sha" in old and old["trec_sha"] != _file_sha(trec):
        return None  # the run file changed since it was written (cut, edited): computed again
    if old.get("qids_sha") == want["qids_sha"]:
        return old
    n_old = int(old.get("queries") or 0)
    if n_old <= len(queries):
        return None
    # runs written before `qids` was stored: the qids the run file answers (a query without hits
    # is absent there, so such a run serves fewer subsets than it could)
    stored = set(old["qids"]) if "qids" in old else set(read_run(trec))
    if not all(q.qid in stored for q in queries):
        return None
    seconds = old.get("seconds")
    return {**old, "seconds": round(seconds * len(queries) / n_old, 2) if seconds is not None else None,
            "subset_of": n_old}


def obvious_sets(split_dir: Path, suite: str, ctx: EvalContext, queries: list[EvalQuery],
                 reporter: Reporter, part: str = "test") -> dict[str, set[str]]:
    """Each query's `OBVIOUS_M` nearest papers by facet similarity (cached in `SPLITDIR/runs`; a
    cache made for more queries of the same index serves any subset of them, e.g. `--limit`)."""
    path = run_paths(split_dir, suite, "obvious", part)[2]
    key = {"qids_sha": _sha([q.qid for q in queries]), "corpus_hash": ctx.index.manifest.get("corpus_hash"),
           "m": OBVIOUS_M, "build": _graph_stamp(ctx.index, "obvious")}
    cached = _cached_json(path) or {}
    old = cached.get("key") if isinstance(cached.get("key"), dict) else {}
    near_cached = cached.get("near") if isinstance(cached.get("near"), dict) else {}
    if all(old.get(k) == key[k] for k in ("corpus_hash", "m", "build")) and \
            all(isinstance(near_cached.get(q.qid), list) for q in queries):
        return {q.qid: set(near_cached[q.qid]) for q in queries}
    near = {}
    with reporter.stage("obvious", total=len(queries), unit="queries") as advance:
        for q in queries:
            near[q.qid] = sorted(ctx.obvious(q, OBVIOUS_M))
            advance(1)
    write_json(path, {"key": key, "near": near})
    return {q: set(v) for q, v in near.items()}


# ---- suites ---------------------------------------------------------------------------------------
def _retrieval_suite(split_dir: Path, suite: str, ctx: EvalContext, options: RunOptions,
                     reporter: Reporter) -> dict[str, Any]:
    queries = load_queries(split_dir, suite, options.part, options.limit)
    if not queries:
        raise GraftError(f"split '{split_dir}' has no {suite} queries" +
                         (f" in part {options.part}" if suite == "incorpus" else ""))
    qrels = read_qrels(Path(split_dir) / suite / "qrels.txt")
    qids = [q.qid for q in queries]
    missing = [q for q in qids if not qrels.get(q)]
    if missing:
        raise GraftError(f"{suite}/qrels.txt has no gold for {len(missing)} queries (e.g. {missing[0]}); "
                         f"re-run `graft eval prepare`")
    if suite == "ooc":
        ctx.prepare_ooc(queries, reporter)
    obvious = obvious_sets(split_dir, suite, ctx, queries, reporter, options.part)
    rows, notes, runs = [], [], {}
    for system in options.systems:
        try:
            run, meta = obtain_run(split_dir, suite, system, ctx, queries, options, reporter)
        except NotApplicable as exc:
            rows.append({"system": system, **{f"R@{k}": None for k in KS}, "non_obvious@20": None,
                         "correct@20": None, "seconds": None})
            notes.append(f"{system}: {exc}")
            continue
        if meta.get("subset_of"):
            notes.append(f"{system}: read from its stored run of {meta['subset_of']} queries (seconds prorated)")
        sub = {q: run.run.get(q, []) for q in qids}
        no = non_obvious_share(sub, qrels, {q: obvious[q] for q in qids}, k=ATTRIBUTION_K)
        rows.append({"system": system, **{f"R@{k}": mean_recall(sub, qrels, k, qids) for k in KS},
                     "non_obvious@20": no["share"], "correct@20": no["correct"], "seconds": meta.get("seconds")})
        runs[system] = meta["run_file"]
    fusions = [s for s in ("graft", "graft-rrf", "graft-walk", "graft-cite", "graft-text") if s in runs]
    if len(fusions) > 1:
        notes.append(f"{', '.join(fusions)} decode each query once (one model, {len(fusions)} fusions): the one "
                     "computed first carries the decoding time")
    return {"rows": rows, "notes": notes, "runs": runs, "queries": len(queries),
            "qrels": sum(len(qrels[q]) for q in qids)}


def _attribution_suite(split_dir: Path, context: Callable[[str], EvalContext], options: RunOptions,
                       reporter: Reporter) -> dict[str, Any]:
    rows, notes, runs = [], [], {}
    systems = [s for s in options.systems if s in ATTRIBUTED]
    for s in options.systems:
        if s not in ATTRIBUTED:
            notes.append(f"{s}: no facet attribution (not an attributed system); skipped")
    n_queries = {}
    for suite in ("incorpus", "ooc"):
        ctx = context(suite)
        queries = load_queries(split_dir, suite, options.part, options.limit)
        n_queries[suite] = len(queries)
        if not queries:
            notes.append(f"{suite}: the split has no queries here" + (f" (part {options.part})"
                                                                       if suite == "incorpus" else ""))
            continue
        if suite == "ooc" and systems:
            ctx.prepare_ooc(queries, reporter)
        for system in systems:
            try:
                run, meta = obtain_run(split_dir, suite, system, ctx, queries, options, reporter)
            except NotApplicable as exc:
                notes.append(f"{system} ({suite}): {exc}")
                continue
            credits, labelled, by_hops, hits, bare = [], [], {1: [], 2: []}, 0, 0
            labels = run.labels or {}
            for q in queries:
                named = labels.get(q.qid, [])
                for rank, (docid, facets) in enumerate((run.credits or {}).get(q.qid, [])[:ATTRIBUTION_K]):
                    hits += 1
                    bare += not facets  # a hit the citation channel alone surfaced
                    for f, hops in facets.items():
                        ok = ctx.supported(q, f, docid)
                        credits.append((f, ok))
                        by_hops.setdefault(hops, []).append(ok)
                        if rank < len(named) and f in named[rank]:
                            labelled.append((f, ok))
            p = attribution_precision(credits)
            shown = attribution_precision(labelled)
            row = {"system": system, "setting": suite, "label precision": shown["overall"],
                   "label facets / hit": len(labelled) / hits if hits else None,
                   "precision": p["overall"], "credits": p["credited"]}
            for f in FACETS:
                row[f] = p["per_facet"][f]["precision"]
            for h in (1, 2):
                row[f"{h}-hop"] = sum(by_hops[h]) / len(by_hops[h]) if by_hops[h] else None
                row[f"{h}-hop credits"] = len(by_hops[h])
            row["hits without a facet credit"] = bare / hits if hits else None
            rows.append(row)
            runs[f"{suite}.{system}"] = meta["run_file"]
    if not any(n_queries.values()):
        raise GraftError(f"split '{split_dir}' has no in-corpus (part {options.part}) or out-of-corpus queries "
                         "for the attribution suite")
    return {"rows": rows, "notes": notes, "runs": runs, "queries": n_queries}


def _coverage_suite(ctx: EvalContext, options: RunOptions, reporter: Reporter) -> dict[str, Any]:
    from training.base_models import load_tokenizer
    from training.pairs import dry_run

    with reporter.stage("coverage", total=None, unit="") as _:
        report = dry_run(ctx.index.path, load_tokenizer(options.base_model))
    rows = []
    for label, key in (("naive", "naive"), ("coverage-aware", "coverage")):
        r = report[key]
        rows.append({"sampling": label, "papers (every facet)": r["papers_share"],
                     "papers (any facet)": r["papers_any_share"], "DocIDs": r["docids_share"],
                     "pairs": r["pairs"], "fewest targets per DocID": r["min_target_count"]})
    notes = [f"tokenizer: {options.base_model}; {ctx.index.n} papers; "
             f"{rows[0]['pairs']:,} naive vs {rows[1]['pairs']:,} coverage-aware pairs"]
    return {"rows": rows, "notes": notes, "runs": {}, "queries": None, "detail": report}


def _survey_suite(split_dir: Path, index_dir: Path, options: RunOptions, reporter: Reporter) -> dict[str, Any]:
    try:
        module = importlib.import_module("eval.survey_suite")
    except ModuleNotFoundError as exc:
        if exc.name != "eval.survey_suite":
            raise
        raise GraftError("--suite survey needs eval/survey_suite.py (the survey evaluation), which this "
                         "installation lacks") from None
    out = module.survey_suite(split_dir, index_dir, systems=list(options.systems), limit=options.limit,
                              part=options.part, reporter=reporter, judge_llm=options.judge)
    return {"rows": out.get("rows", []), "notes": out.get("notes", []), "runs": out.get("runs", {}),
            "queries": out.get("queries")}


# ---- tables ---------------------------------------------------------------------------------------
def _cell(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def markdown_table(rows: list[dict[str, Any]]) -> list[str]:
    """A Markdown table over the union of the rows' keys (first row's order first)."""
    if not rows:
        return ["(no rows)"]
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    lines = ["| " + " | ".join(cols) + " |",
             "|" + "|".join("---" if i == 0 else "---:" for i in range(len(cols))) + "|"]
    lines += ["| " + " | ".join(_cell(r.get(c)) for c in cols) + " |" for r in rows]
    return lines


def _check_run_corpus(run_path: Path, qrels_path: Path) -> None:
    """Refuse a run made by `graft eval run` on another corpus than the split the qrels belong to
    (its record `X.json` beside `X.trec` and the split's `split.json` two levels above the qrels);
    nothing is checked where either is missing."""
    record = _cached_json(run_path.with_suffix(".json"))
    split = _cached_json(qrels_path.parent.parent / "split.json") or {}
    made, wanted = (record or {}).get("corpus_hash"), split.get("corpus_hash")
    parts = split.get("incorpus_parts") if isinstance(split.get("incorpus_parts"), dict) else {}
    # an in-corpus run is made on a part's leak-free corpus, which belongs to the split too
    own = {wanted} | {p.get("corpus_hash") for p in parts.values() if isinstance(p, dict)}
    if made and wanted and made not in own:
        raise GraftError(f"{run_path} was made on another corpus (hash {str(made)[:12]}) than the split of "
                         f"{qrels_path} (hash {str(wanted)[:12]}): a run of another split, or of this folder "
                         "before it was prepared again; run `graft eval run` on this split")


#: Suites whose queries come in a dev and a test part.
PARTED = ("incorpus", "attribution", "survey")


def table_stem(suite: str, name: str, meta: dict[str, Any]) -> str:
    """`eval_{suite}_{name}`; the dev part's tables are `eval_{suite}-dev_{name}` and a `--limit N`
    run that left queries out writes `eval_{suite}-firstN_{name}` (`-dev-firstN` both), so neither
    replaces the full test table."""
    tags = ("-dev" if meta.get("part") == "dev" and suite in PARTED else "") + \
        (f"-first{meta['limit']}" if meta.get("limited") else "")
    return f"eval_{suite}{tags}_{name}"


def _limited(split_dir: Path, suite: str, options: RunOptions, queries: Any) -> bool:
    """Whether `options.limit` left out queries of the suite (of the in-corpus part, out of corpus)."""
    if options.limit is None or suite not in ("incorpus", "ooc", "attribution"):
        return False
    if suite == "attribution":  # the suites it drew queries from
        return any(options.limit < len(load_queries(split_dir, s, options.part, None))
                   for s in ("incorpus", "ooc") if isinstance(queries, dict) and queries.get(s))
    return options.limit < len(load_queries(split_dir, suite, options.part, None))


def _row_key(row: dict[str, Any]) -> tuple[str, str]:
    return str(row.get("system")), str(row.get("setting", ""))


#: What must agree for a table's earlier rows to stand beside a new run's: the same split, index,
#: graph, queries and out-of-corpus rows.
_SAME_TABLE = ("corpus_hash", "index", "ooc_index", "protocol", "build", "part", "limit", "queries", "qrels",
               "text_neighbours", "feedback")


def _keep_earlier_rows(path: Path, table: dict[str, Any]) -> None:
    """Keep the rows of systems this run did not compute from the table already at `path` (the
    same suite and name), when it was made on the same split, index and queries: `--systems
    graft,...` after `--systems bm25,...` fills one table instead of replacing the first. Their
    notes and run paths come along, and a note says which rows are earlier."""
    old = _cached_json(path)
    if not old or not isinstance(old.get("rows"), list) or not isinstance(old.get("meta"), dict):
        return
    meta = table["meta"]
    if any(old["meta"].get(k) != meta.get(k) for k in _SAME_TABLE):
        return
    mine = {_row_key(r) for r in table["rows"]}
    kept = [r for r in old["rows"] if isinstance(r, dict) and _row_key(r) not in mine]
    if not kept:
        return
    order = {name: i for i, name in enumerate(SYSTEMS)}
    systems = sorted(dict.fromkeys(str(r.get("system")) for r in kept), key=lambda x: order.get(x, 99))
    table["rows"] = sorted(table["rows"] + kept, key=lambda r: (r.get("setting", ""), order.get(r.get("system"), 99)))
    old_notes = [n for n in old.get("notes") or [] if isinstance(n, str)]
    earlier = [n for n in old_notes if any(n.startswith((f"{s}:", f"{s} (")) for s in systems)
               or (n.startswith("model: ") and any(s.startswith("graft") for s in systems))]
    # which command made each row: the earlier table's record of it, else that table's own command
    made_before = old["meta"].get("made_by") if isinstance(old["meta"].get("made_by"), dict) else {}
    fallback = {"command": old["meta"].get("command"), "date": old["meta"].get("date")}
    made = {s: made_before.get(s) if isinstance(made_before.get(s), dict) else fallback for s in systems}
    by_run: dict[tuple[Any, Any], list[str]] = {}
    for s in systems:
        by_run.setdefault((made[s].get("command"), made[s].get("date")), []).append(s)
    table["notes"] = [n for n in table["notes"] if n not in earlier] + earlier + [
        f"{', '.join(group)}: rows of an earlier run of this table (`{command}`, {date})"
        for (command, date), group in by_run.items()]
    table["runs"] = {**{k: v for k, v in (old.get("runs") or {}).items() if k.split(".", 1)[-1] in systems},
                     **table["runs"]}  # keyed by system, or by "suite.system" (attribution)
    meta["systems"] = list(dict.fromkeys([*meta["systems"], *systems]))
    meta["made_by"] = {**made, **{str(r.get("system")): {"command": meta["command"], "date": meta["date"]}
                                  for r in table["rows"] if str(r.get("system")) not in made}}


def write_tables(results_dir: Path, suite: str, name: str, table: dict[str, Any]) -> tuple[Path, Path]:
    """Write `{table_stem}.md` and `.json` (atomically) and return their paths."""
    results_dir = Path(results_dir)
    m = table["meta"]
    stem = table_stem(suite, name, m)
    lines = [f"# GRAFT evaluation — {stem[5:].rsplit('_' + name, 1)[0]} — {name}", ""]
    if m.get("label"):
        lines += [f"**{m['label']}**", ""]
    lines += [
        f"Command: `{m['command']}`  ",
        f"Date: {m['date']} · split seed {m['seed']} · corpus hash `{str(m['corpus_hash'])[:16]}` "
        f"(source `{str(m['source_hash'])[:16]}`) · index `{m['index']}`  ",
        (f"Queries: {_count_text(m['queries'])}" if m.get("queries") is not None
         else "Queries: none (counts over the corpus)")
        + (f" · gold pairs: {_count_text(m['qrels'])}" if m.get("qrels") is not None else "")
        + (f" · part: {m['part']}" if suite in ("incorpus", "survey") and m.get("part") else "") + "  ",
    ]
    if m.get("build"):
        b = m["build"]
        scorer = f" ({b['facet_scorer']} scorer)" if b["extractor"] == "heuristic" and b.get("facet_scorer") else ""
        lines.append(f"Index build: {b['extractor']} facets{scorer} · top-K {b['top_k']} · alpha {b['alpha']} · "
                     f"beta {b['beta']} · title weight {b['title_weight']}"
                     + (" · items read in context" if b.get("item_context") == "late" else "")
                     + (f" · encoder on {b['encoder_backend']}" if b.get("encoder_backend") else "")
                     + (f" · out-of-corpus rows: text coupling with {m['text_neighbours']} nearest papers"
                        if m.get("text_neighbours") else "")
                     + (f" · feedback from the first {m['feedback']}" if m.get("feedback") else "") + "  ")
    lines += ["Versions: " + ", ".join(f"{k} {v}" for k, v in sorted(m["versions"].items())), ""]
    lines += markdown_table(table["rows"])
    lines += [""] + [f"- {n}" for n in table["notes"]]
    md = results_dir / f"{stem}.md"
    with atomic_path(md) as tmp:
        tmp.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    js = results_dir / f"{stem}.json"
    write_json(js, table)
    return md, js


def _count_text(count: Any) -> str:
    """A header count: `1,602`, or per suite `incorpus 801 · ooc 498` (the attribution suite's)."""
    if isinstance(count, dict):
        return ", ".join(f"{k} {v:,}" if isinstance(v, int) else f"{k} {v}" for k, v in count.items())
    return f"{count:,}" if isinstance(count, int) else str(count)


_DEFINITIONS = {
    "incorpus": ["R@k: share of the query's citation neighbours (references and citing papers) in the top k, "
                 "averaged over queries; leak-free protocol: the part's index is built from the corpus less every "
                 "citation link of its queries (their gold), so no system reads the answer",
                 f"non_obvious@20: share of correct top-20 hits outside the query's {OBVIOUS_M} nearest papers by "
                 "facet similarity (mean over facets of the max item-item cosine); correct@20 counts them"],
    "ooc": ["query = title + abstract of a paper removed before the build (no references given to any "
            "system); gold = its references into the corpus; its facet items and edge rows from its text "
            "(citation half: {citation_half}; facet-only rows for the facet system) are extracted once (heuristic extractor, the index's encoder) into "
            "SPLITDIR/ooc/facets.jsonl",
            f"non_obvious@20 as in corpus ({OBVIOUS_M} nearest by facet similarity of the query's extracted items)"],
    "attribution": ["label precision: the same share over the facets each hit's label names, what a user is "
                    "told (`Hit.stands_out`: where the hit has direct facet edges, those within 0.05 of the strongest "
                    "weight; else its strongest two-hop path's facet); label facets / hit: how many it names",
                    "precision: share of credited facets of top-20 hits whose facet graph holds an edge "
                    "between query and hit (in corpus: max(W_f, W_f^T)[q, c] > 0; out of corpus: the "
                    "query's ExternalScorer row from its text, the teacher's rows, for every system); 1-hop / 2-hop: "
                    "credits by evidence hops; hits without a facet credit: share of the top-20 hits that only the "
                    "channels surfaced (the citation channel's evidence is the first results a hit cites or is "
                    "cited by, the text channel's the cosine of the two titles + abstracts; neither is a facet)"],
}


def run_suite(split_dir: str | Path, suite: str, options: RunOptions | None = None, *,
              reporter: Reporter | None = None, command: str | None = None, encoder: Any = None) -> dict[str, Any]:
    """Run one suite and write its tables (`run_suites` with one suite)."""
    return run_suites(split_dir, [suite], options, reporter=reporter, command=command, encoder=encoder)[0]


def run_suites(split_dir: str | Path, suites: list[str], options: RunOptions | None = None, *,
               reporter: Reporter | None = None, command: str | None = None,
               encoder: Any = None, on_table: Callable[[dict[str, Any]], None] | None = None,
               ) -> list[dict[str, Any]]:
    """Run suites over one split and index, sharing the loaded index, encoder and out-of-corpus
    rows, and write each suite's tables.

    Args:
        split_dir: a split directory from `graft eval prepare`.
        suites: names from `SUITES`, run in the given order.
        options: systems, index, part, limit, ...
        reporter: progress bars (quiet by default).
        command: the command recorded in the tables (default: this process's argv).
        encoder: a loaded `graft.encoder.Encoder` to share (tests).
        on_table: called with each suite's table as soon as its files are written (a caller that
            copies them elsewhere keeps what finished if a later suite is cut short).
    Returns:
        One table per suite: {"suite", "name", "rows", "notes", "runs", "meta", "files"}.
    Raises:
        GraftError: not a split, no index, an index of another corpus, unknown suite or system.
    """
    started = time.monotonic()
    if isinstance(suites, str):  # would be read one letter at a time
        raise GraftError(f"suites takes a list of suite names, not one string: [{suites!r}]")
    bad = [s for s in suites if s not in SUITES]
    if bad or not suites:
        raise GraftError(f"unknown suite {', '.join(bad) or '(none)'}; allowed: {', '.join(SUITES)}")
    options = options or RunOptions()
    split_dir = Path(split_dir)
    _check_systems(suites, options.systems)
    _check_options(suites, options)
    split = read_split(split_dir)  # not a split: said before the folders beside it are checked
    if options.results_dir is None:  # beside the split: a quick or partial run never replaces tables elsewhere
        options = replace(options, results_dir=split_dir / "results")
    _check_outputs(options)
    problem = folder_problem(split_dir / "runs")
    if problem:
        raise GraftError(f"{split_dir / 'runs'} {problem}; the split keeps its TREC runs in that folder")
    reporter = reporter or Reporter(quiet=True)
    deadline = started + options.time_budget_s if options.time_budget_s is not None else None
    contexts: dict[Path, EvalContext] = {}

    def context(suite: str) -> EvalContext:
        """The loaded index (and its shared resources) that `suite`'s queries are answered from."""
        index_dir = Path(options.index_dir) if options.index_dir else default_index(split_dir, suite, options.part)
        if index_dir.resolve() not in contexts:
            index, naive = _open_indexes(split_dir, split, suite, index_dir, options)
            shared = next((c._encoder for c in contexts.values() if c._encoder is not None), encoder)
            contexts[index_dir.resolve()] = EvalContext(
                index, encoder=shared, naive_index=naive, beams=options.beams, device=options.device,
                split_dir=split_dir, decode_batch=options.decode_batch, deadline=deadline)
        return contexts[index_dir.resolve()]

    for suite in suites:  # every index the suites need, checked before any work
        if suite == "attribution":
            context("incorpus")
            context("ooc")
        else:
            context(suite)
    tables = []
    for suite in suites:
        mine = replace(options, systems=_suite_systems(suite, options.systems))
        tables.append(_one_suite(split_dir, split, suite, context, mine, reporter, command))
        if on_table is not None:
            on_table(tables[-1])
    return tables


def _open_indexes(split_dir: Path, split: dict[str, Any], suite: str, index_dir: Path,
                  options: RunOptions) -> tuple[Index, Index | None]:
    """The index a suite runs on, and the naive index, each checked against the corpus it must come
    from: an in-corpus part's leak-free corpus for `incorpus` (or, given with `--index`, the
    split's own corpus: a run that reads the gold links, labelled so), the split's corpus otherwise
    (or, given with `--index`, a part's: a model trained leak-free answers both kinds of query)."""
    part = suite_part(suite, options.part)
    wanted = expected_corpus_hash(split, part)
    allowed = {wanted}
    if options.index_dir is not None:  # the split's whole corpus (reads gold links in corpus), and for
        # the suites outside the corpus a part's leak-free corpus too (their queries are in none of them)
        allowed.add(split["corpus_hash"])
        if part is None:
            allowed |= {expected_corpus_hash(split, p) for p in split.get("incorpus_parts") or {}}
    source = split_dir / "corpus.jsonl" if part is None else split_dir / "incorpus" / part / "corpus.jsonl"
    if not (index_dir / "manifest.json").is_file() and options.index_dir is None:
        raise GraftError(f"no index at {index_dir}; build the split's indexes with "
                         f"`graft eval build {shlex.quote(str(split_dir))}` or pass --index")
    index = Index.open(index_dir)
    if index.manifest.get("corpus_hash") not in allowed:
        raise GraftError(f"index '{index_dir}' was built from another corpus (hash "
                         f"{str(index.manifest.get('corpus_hash'))[:12]}, expected {wanted[:12]}); build it from "
                         f"{source} (`graft eval build {shlex.quote(str(split_dir))}` builds every index of the split)")
    naive = None
    if options.naive_index is not None:
        naive = Index.open(options.naive_index)
        if naive.manifest.get("corpus_hash") != index.manifest.get("corpus_hash"):
            raise GraftError(f"--naive-index '{options.naive_index}' was built from another corpus than "
                             f"'{index_dir}'; build and train it from {source} with --sampling naive")
    return index, naive


def protocol(split: dict[str, Any], suite: str, index: Index, part: str) -> str | None:
    """What an in-corpus run may read: "leak-free" on the part's own index, "reads gold links" on
    an index of the split's whole corpus (which holds the queries' citation links); None for the
    suites whose queries are outside the corpus."""
    if suite_part(suite, part) is None:
        return None
    return "leak-free" if index.manifest.get("corpus_hash") == expected_corpus_hash(split, part) else "reads gold links"


def _systems_of(suite: str) -> tuple[str, ...]:
    """The systems a suite can run: the survey writers for the survey suite, the retrievers otherwise."""
    return SURVEY_SYSTEMS if suite == "survey" else SYSTEMS


def _suite_systems(suite: str, systems: list[str]) -> list[str]:
    """The systems of `systems` that `suite` runs."""
    return [s for s in systems if s in _systems_of(suite)]


def _check_systems(suites: list[str], systems: list[str]) -> None:
    """Before any work: every system is known and every suite that runs systems (all but coverage,
    which measures the index's training pairs) runs at least one of them."""
    allowed = f"{', '.join(SYSTEMS)}; survey suite: {', '.join(SURVEY_SYSTEMS)}"
    ranking = [s for s in suites if s != "coverage"]
    if ranking and not systems:
        raise GraftError(f"no systems given (--systems); allowed: {allowed}")
    unknown = [s for s in systems if s not in SYSTEMS and s not in SURVEY_SYSTEMS]
    if unknown:
        raise GraftError(f"unknown system(s) {', '.join(unknown)}; allowed: {allowed}")
    for suite in ranking:
        if not _suite_systems(suite, systems):
            raise GraftError(f"--suite {suite} runs none of the systems given ({', '.join(systems)}); "
                             f"its systems: {', '.join(_systems_of(suite))}")


def _check_options(suites: list[str], options: RunOptions) -> None:
    """Before any work: options that none of the suites would use are refused, not ignored."""
    if options.part == "dev" and "ooc" in suites:
        raise GraftError("--part dev: the ooc suite has one set of queries (its table would be the test one); "
                         "run it without --part (dev parts: incorpus, attribution's in-corpus half, survey)")
    if options.limit is not None and set(suites) <= {"coverage"}:
        raise GraftError("--limit: the coverage suite has no queries (it counts the index's training pairs)")
    if options.judge is not None and "survey" not in suites:
        raise GraftError("--judge-model / --judge-base-url judge the survey suite's claims; add --suite survey")
    if "attribution" in suites and not [s for s in options.systems if s in ATTRIBUTED]:
        raise GraftError(f"--suite attribution scores facet credits, and none of the systems given credits facets "
                         f"({', '.join(options.systems)}); attributed systems: {', '.join(ATTRIBUTED)}")


def _check_outputs(options: RunOptions) -> None:
    """Before any work: the tables' folder can be a folder and the table name is a file name."""
    results = Path(options.results_dir or ".")
    problem = folder_problem(results)
    if problem:
        raise GraftError(f"--results {results} {problem}; give a folder for the tables")
    if options.name is not None and (not options.name.strip() or any(c in options.name for c in "/\\")
                                     or options.name in (".", "..")):
        raise GraftError(f"--name {options.name!r} must be a file-name part, without path separators")


def _one_suite(split_dir: Path, split: dict[str, Any], suite: str, context: Callable[[str], EvalContext],
               options: RunOptions, reporter: Reporter, command: str | None) -> dict[str, Any]:
    # the attribution suite answers in-corpus and out-of-corpus queries from their own indexes: its
    # header names the in-corpus one (the out-of-corpus one is in `ooc_index`)
    ctx = context("incorpus" if suite == "attribution" else suite)
    index, naive, index_dir = ctx.index, ctx.naive_index, ctx.index.path
    if suite in ("incorpus", "ooc"):
        body = _retrieval_suite(split_dir, suite, ctx, options, reporter)
    elif suite == "attribution":
        body = _attribution_suite(split_dir, context, options, reporter)
    elif suite == "coverage":
        body = _coverage_suite(ctx, options, reporter)
    else:
        body = _survey_suite(split_dir, index_dir, options, reporter)
    label = options.label
    reads = protocol(split, "incorpus" if suite == "attribution" else suite, index, options.part)
    if reads == "reads gold links":
        leak = ("reads gold links: the in-corpus queries were answered from an index that holds their citation "
                "links (not the leak-free protocol)")
        label = f"{label} · {leak}" if label else leak
    ooc_ctx = context("ooc") if suite == "attribution" else ctx
    trained = [(m, s) for m in dict.fromkeys((index, naive, ooc_ctx.index, ooc_ctx.naive_index))
               if (s := _model_stamp(m))]
    stamps = [s for _, s in trained]
    if any(s.get("base_model") == "tiny" for s in stamps) and any(
            str(r.get("system", "")).startswith("graft") for r in body["rows"]):
        tiny = "pipeline check: GRAFT rows come from a tiny random model trained on the CPU, not a result"
        label = f"{label} · {tiny}" if label else tiny
    # an index without title + abstract vectors gives out-of-corpus rows no text coupling
    half = ("text coupling with its nearest papers by title + abstract, then a second pass adding the citation "
            "links of the papers the first ranks highest") if ooc_ctx.ooc_key.get("text_neighbours") else (
            "none: the index has no title + abstract embeddings (built with --no-paper-embeddings), so the rows "
            "hold facet similarity only")
    notes = list(body["notes"]) + [n.replace("{citation_half}", half) for n in _DEFINITIONS.get(suite, [])]
    if stamps and any(str(r.get("system", "")).startswith("graft") for r in body["rows"]):
        notes += [f"model: {s['index']} (base {s['base_model']}, {s['sampling']} pairs, {s['steps']} steps)"
                  + _check_note(m) for m, s in trained]
    name = options.name or corpus_name(split)
    limited = _limited(split_dir, suite, options, body.get("queries"))
    meta = {
        "command": command or " ".join(["graft", *sys.argv[1:]]),
        "date": str(dt.date.today()),
        "created": now_iso(),
        "split": str(split_dir),
        "index": str(index_dir),
        "ooc_index": str(ooc_ctx.index.path) if suite == "attribution" else None,
        "protocol": reads,
        "seed": split["seed"],
        "source": split["source"],
        "source_hash": split["source_hash"],
        "corpus_hash": split["corpus_hash"],
        "papers": index.n,
        "build": build_settings(index),
        "text_neighbours": ooc_ctx.ooc_key["text_neighbours"] if suite in ("ooc", "attribution") else None,
        "feedback": ooc_ctx.ooc_key.get("feedback") if suite in ("ooc", "attribution") else None,
        "queries": body.get("queries"),
        "qrels": body.get("qrels"),
        "part": options.part if suite in PARTED else None,
        # a limit that left no query out is no limit: the table is the full one
        "limit": options.limit if limited else None,
        "limited": limited,
        "systems": list(options.systems),
        "label": label,
        "versions": _versions(),
    }
    table = {"suite": suite, "name": name, "rows": body["rows"], "notes": notes, "runs": body["runs"], "meta": meta}
    if "detail" in body:
        table["detail"] = body["detail"]
    if suite in ("incorpus", "ooc", "attribution"):
        _keep_earlier_rows(Path(options.results_dir) / f"{table_stem(suite, name, meta)}.json", table)
    md, js = write_tables(options.results_dir, suite, name, table)
    table["files"] = [str(md), str(js)]
    return table


def score_run(run_path: str | Path, qrels_path: str | Path, ks: tuple[int, ...] = KS, *,
              limit: int | None = None, ties: str = "docid") -> dict[str, Any]:
    """Re-score a TREC run against qrels: Recall@k over the qrels' queries (the first `limit` by
    qid, as `graft eval run --limit` takes them); equal scores ordered as `ties` says
    (`eval.trec.TIES`: "docid", as the tables are scored, or "trec_eval").

    Returns:
        {"queries": n, "answered": queries with at least one result, "R@k": value per k}.
    Raises:
        GraftError: unreadable files, an empty run, qrels without a relevant document, a run
            none of whose queries the qrels judge, or a run whose record (`X.json` beside `X.trec`)
            names another corpus than the split the qrels belong to.
    """
    if limit is not None and limit < 1:
        raise GraftError(f"--limit {limit} must be >= 1")
    _check_run_corpus(Path(run_path), Path(qrels_path))
    try:
        run = read_run(run_path, ties=ties)
    except ValueError as exc:  # an unknown `ties`
        raise GraftError(str(exc)) from None
    qrels = read_qrels(qrels_path)
    if not run:
        raise GraftError(f"{run_path} holds no results (an empty run); nothing to score")
    qids = sorted(q for q in qrels if qrels[q])[:limit]
    if not qids:
        raise GraftError(f"{qrels_path}: no query has a relevant document; nothing to score against")
    if not set(run) & set(qids):
        raise GraftError(f"none of the {len(run)} queries of {run_path} is in {qrels_path}: the qrels of "
                         "another suite or split?")
    return {"queries": len(qids), "answered": sum(1 for q in qids if run.get(q)),
            **{f"R@{k}": mean_recall(run, qrels, k, qids) for k in ks}}
