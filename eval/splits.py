"""Evaluation splits: in-corpus queries, out-of-corpus and survey hold-outs, written to a split directory.

`prepare_split(corpus, out)` reads a corpus, removes the hold-outs *before* any graph is built and
writes (the contract shared by `graft eval run` and the survey suite):

    SPLITDIR/split.json            seed, source, source_hash, corpus_hash, counts, params, command,
                                   created, versions
    SPLITDIR/corpus.jsonl          the reduced corpus (id, title, abstract, year, venue, authors,
                                   full text where given, references restricted to ids still in it)
    SPLITDIR/incorpus/queries.jsonl + qrels.txt   papers with >= 5 citation neighbours, dev/test
                                   (+ qrels.dev.txt, qrels.test.txt: one part's)
    SPLITDIR/incorpus/{dev,test}/corpus.jsonl      the reduced corpus less that part's queries' gold
                                   links: the corpus of the part's evaluation index (leak-free)
    SPLITDIR/ooc/queries.jsonl + qrels.txt        newest citing papers with >= 3 references into the rest
    SPLITDIR/survey/queries.jsonl + qrels.txt     review-like papers with >= 20 references, dev/test

Selection rules (all deterministic from the corpus and the seed):

- **out of corpus**: citing papers newest first (year descending; the seed's permutation breaks ties
  inside a year); a paper is held out when it keeps >= `ooc_min_refs` references into the papers
  not held out and holding it out leaves every earlier hold-out with that many too. Gold = its
  references into the reduced corpus.
- **survey**: among the remaining papers with >= `survey_min_refs` references into the rest, not
  cited by any out-of-corpus hold-out (so removing a survey never shrinks an out-of-corpus gold
  list), `n_survey + n_survey_dev` are drawn with the seed, under the same "everyone keeps enough"
  rule. The first `n_survey` drawn are the test part, the rest the dev part (for tuning the writer);
  so adding dev hold-outs never changes which papers are the test part.
- **in corpus**: `incorpus_queries` papers drawn with the seed from those of the reduced corpus
  with >= `incorpus_min_neighbours` direct citation neighbours there (references and citing
  papers); gold = those neighbours; `dev_share` of them are the dev part, the rest the test part.

The in-corpus protocol is leak-free: each part is answered from an index built from
`incorpus/{part}/corpus.jsonl`, the reduced corpus in which every citation link between one of the
part's queries and another paper (its gold, either way) is removed. The query papers keep their
title, abstract and facets; nothing an index of that corpus holds, and so nothing a system reads
(graph candidates, coupling and co-citation counts, the citation channel, citation baselines,
feedback passes), can lead to a gold paper through the gold link itself. Every removed link
thins the graph for all papers, so a part holds few queries next to the corpus
(`incorpus_queries`: on cs768, 300 per part remove 15% of the links).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graft.config import type_problems
from graft.errors import GraftError, InputValidationError
from graft.jsonio import loads
from graft.manifest import library_versions, now_iso
from graft.store import folder_problem, read_json, write_json, write_lines
from graphbuild.corpus import Corpus, load_corpus

#: Suites with their own query/qrels folder in a split directory.
SPLIT_SUITES = ("incorpus", "ooc", "survey")
SPLIT_FORMAT = "graft-eval-split"
SPLIT_VERSION = 2  # 2: in-corpus parts with their own leak-free corpora
#: The in-corpus parts, each with its own leak-free corpus and index under SPLITDIR/incorpus/{part}/.
PARTS = ("dev", "test")


@dataclass(frozen=True)
class SplitConfig:
    seed: int = 0  # seeds tie-breaking among equally new papers, the survey draw and dev/test
    n_ooc: int = 500  # out-of-corpus hold-outs, newest citing papers first (the paper's ~500)
    ooc_min_refs: int = 3  # references into the reduced corpus an out-of-corpus query must keep
    n_survey: int = 30  # review-like hold-outs for the survey suite's test part
    n_survey_dev: int = 30  # further review-like hold-outs, the survey suite's dev part
    survey_min_refs: int = 20  # references into the reduced corpus a survey query must keep
    incorpus_min_neighbours: int = 5  # citation neighbours (refs + citing) of an in-corpus query
    # in-corpus queries drawn from the eligible papers (0 = all of them); each part's index loses its
    # queries' links, so the parts stay small next to the corpus
    incorpus_queries: int = 600
    dev_share: float = 0.5  # share of in-corpus queries in dev; the rest is test

    def __post_init__(self) -> None:
        problems = type_problems(self)
        if problems:
            raise InputValidationError("invalid split settings: " + "; ".join(problems))
        if self.seed < 0:
            raise InputValidationError(f"seed {self.seed} must be an integer >= 0")
        if not 0.0 <= self.dev_share <= 1.0:
            raise InputValidationError(f"dev share {self.dev_share} must lie in [0, 1]")
        for name in ("n_ooc", "n_survey", "n_survey_dev", "ooc_min_refs", "survey_min_refs",
                     "incorpus_min_neighbours", "incorpus_queries"):
            if getattr(self, name) < 0:
                raise InputValidationError(f"{name} = {getattr(self, name)} must be >= 0")
        if self.incorpus_min_neighbours < 1:  # a query without gold cannot be scored
            raise InputValidationError(f"incorpus_min_neighbours = {self.incorpus_min_neighbours} must be >= 1: an "
                                       "in-corpus query's gold is its citation neighbours")


@dataclass
class Split:
    """What `prepare_split` selected: paper ids per suite and the gold per query."""

    ooc: list[str]
    survey: list[str]  # test part
    survey_dev: list[str]
    incorpus_dev: list[str]
    incorpus_test: list[str]
    gold: dict[str, dict[str, list[str]]]  # suite -> query paper id -> gold paper ids (sorted)
    kept: list[str]  # ids of the reduced corpus, in corpus order


def _greedy_holdout(order: list[str], refs: dict[str, set[str]], cited_by: dict[str, set[str]],
                    removed: set[str], min_refs: int, limit: int, allowed: Any = None) -> list[str]:
    """Hold out papers in `order` while each keeps >= min_refs references into the rest.

    `removed` is updated in place. Holding out p also removes p from the reference lists of
    hold-outs that cite it, so p is skipped when that would drop one of them below `min_refs`.
    """
    chosen: list[str] = []
    kept_refs: dict[str, int] = {}
    for pid in order:
        if len(chosen) >= limit:
            break
        if pid in removed or (allowed is not None and not allowed(pid)):
            continue
        n_refs = len(refs[pid] - removed)
        if n_refs < min_refs:
            continue
        citing_holdouts = [h for h in cited_by[pid] if h in kept_refs]
        if any(kept_refs[h] - 1 < min_refs for h in citing_holdouts):
            continue
        for h in citing_holdouts:
            kept_refs[h] -= 1
        # references to p's own hold-out peers are already gone from n_refs
        kept_refs[pid] = n_refs
        removed.add(pid)
        chosen.append(pid)
    return chosen


def select_split(corpus: Corpus, config: SplitConfig) -> Split:
    """Choose the hold-outs and in-corpus queries of a corpus (pure: writes nothing)."""
    papers = corpus.papers
    ids: list[str] = papers["paper_id"].to_list()
    years = papers["year"].to_list()
    refs = {p: set(r or []) for p, r in zip(ids, papers["references"].to_list())}
    cited_by: dict[str, set[str]] = defaultdict(set)
    for p, rs in refs.items():
        for r in rs:
            cited_by[r].add(p)
    rng = np.random.default_rng(config.seed)
    tie = {p: int(t) for p, t in zip(ids, rng.permutation(len(ids)))}

    removed: set[str] = set()
    year_of = {p: y or 0 for p, y in zip(ids, years)}
    newest = sorted((p for p in ids if refs[p]), key=lambda p: (-year_of[p], tie[p]))
    ooc = _greedy_holdout(newest, refs, cited_by, removed, config.ooc_min_refs, config.n_ooc)
    ooc_cited = set().union(*(refs[p] for p in ooc)) if ooc else set()

    pool = [p for p in ids if p not in removed and p not in ooc_cited
            and len(refs[p] - removed) >= config.survey_min_refs]
    draw = [pool[i] for i in rng.permutation(len(pool))]
    drawn = _greedy_holdout(draw, refs, cited_by, removed, config.survey_min_refs,
                            config.n_survey + config.n_survey_dev, allowed=lambda p: p not in ooc_cited)
    survey, survey_dev = drawn[:config.n_survey], drawn[config.n_survey:]

    kept = [p for p in ids if p not in removed]
    kept_set = set(kept)
    neighbours = {p: (refs[p] | cited_by[p]) & kept_set for p in kept}
    eligible = [p for p in kept if len(neighbours[p]) >= config.incorpus_min_neighbours]
    perm = [eligible[i] for i in rng.permutation(len(eligible))]
    if config.incorpus_queries:
        perm = perm[:config.incorpus_queries]
    n_dev = int(round(config.dev_share * len(perm)))
    dev, test = sorted(perm[:n_dev]), sorted(perm[n_dev:])

    gold = {
        "ooc": {p: sorted(refs[p] & kept_set) for p in ooc},
        "survey": {p: sorted(refs[p] & kept_set) for p in drawn},
        "incorpus": {p: sorted(neighbours[p]) for p in perm},
    }
    return Split(ooc=ooc, survey=survey, survey_dev=survey_dev, incorpus_dev=dev, incorpus_test=test,
                 gold=gold, kept=kept)


def hide_links(records: list[dict[str, Any]], queries: set[str]) -> tuple[list[dict[str, Any]], int]:
    """The records with every citation link between a query paper and another paper removed (the
    query's references, and the query in the references of the papers citing it): an in-corpus
    part's leak-free corpus. Returns the new records and the number of links removed."""
    out, hidden = [], 0
    for record in records:
        refs = record["references"]
        keep = [] if record["id"] in queries else [r for r in refs if r not in queries]
        hidden += len(refs) - len(keep)
        out.append({**record, "references": keep})
    return out, hidden


def _record(row: dict[str, Any], kept: set[str]) -> dict[str, Any]:
    """A reduced corpus's record of a kept paper: as loaded, its references cut to the kept papers,
    its full text kept where it has one (the facet extractor reads it: without it, the split's index
    would differ from the corpus's and `--cache-from` could lend it no facets)."""
    record = {"id": row["paper_id"], "title": row["title"], "abstract": row["abstract"], "year": row["year"],
              "venue": row["venue"], "authors": list(row["authors"] or []),
              "references": [r for r in (row["references"] or []) if r in kept]}
    if row.get("full_text"):
        record["full_text"] = row["full_text"]
    return record


#: In a split directory while `prepare_split` writes it (split.json is written last): a stopped
#: split is neither read as a split nor refused as a foreign folder by the next prepare.
IN_PROGRESS = ".split-in-progress"


def _check_out(corpus: str | Path, out: Path) -> None:
    """Refuse, before any work, a split directory the split must not write into: one `folder_problem`
    names, a folder with other content and no split.json (the split would put its files among
    them), or one that holds the corpus itself (the reduced corpus would replace its source).

    Raises:
        InputValidationError: naming the folder and what to do.
    """
    problem = folder_problem(out)
    if problem:
        raise InputValidationError(f"--out {out} {problem}; give the split directory to write (new or a split)")
    if not out.is_dir():
        return
    source = Path(corpus).resolve() if str(corpus) != "aclsum" else None
    if source is not None and source.is_relative_to(out.resolve()):
        raise InputValidationError(f"--out {out} holds the corpus {corpus}, which the split's files would "
                                   f"replace; write the split into another folder")
    if not (out / "split.json").is_file() and not (out / IN_PROGRESS).is_file() and any(out.iterdir()):
        raise InputValidationError(f"--out {out} holds files but no split (no split.json); write the split into "
                                   f"a new or empty folder")


def write_qrels(path: str | Path, gold: dict[str, list[str]]) -> None:
    """TREC qrels `qid 0 docid 1`, queries and documents in sorted order."""
    write_lines(Path(path), [f"{q} 0 {d} 1" for q in sorted(gold) for d in sorted(gold[q])])


def prepare_split(corpus: str | Path, out: str | Path, config: SplitConfig | None = None, *,
                  command: str | None = None, skip_bad: bool = False) -> dict[str, Any]:
    """Select the splits of a corpus and write a split directory (module docstring).

    Args:
        corpus: a corpus path accepted by `graphbuild.corpus.load_corpus` (or "aclsum").
        out: the split directory (created; files are replaced atomically).
        config: selection parameters.
        command: the command line recorded in split.json (default: this process's argv).
        skip_bad: skip invalid corpus records (counted in split.json) instead of stopping.
    Returns:
        The contents of split.json.
    Raises:
        InputValidationError: `out` cannot take the split (`_check_out`), the corpus cannot be read,
            or it leaves no in-corpus query.
    """
    config = config or SplitConfig()
    out = Path(out)
    _check_out(corpus, out)
    loaded = load_corpus(corpus, skip_bad=skip_bad)
    split = select_split(loaded, config)
    if not split.incorpus_dev and not split.incorpus_test:
        raise InputValidationError(
            f"{corpus}: no paper has >= {config.incorpus_min_neighbours} citation neighbours after the "
            f"hold-outs; the corpus needs in-corpus references (or lower --min-neighbours)")
    kept = set(split.kept)
    by_id = {row["paper_id"]: row for row in loaded.papers.iter_rows(named=True)}
    reduced = [_record(by_id[p], kept) for p in split.kept]
    out.mkdir(parents=True, exist_ok=True)
    (out / IN_PROGRESS).write_text("a split being written; stopped before its split.json if this file stays: run "
                                   "`graft eval prepare` again\n", encoding="utf-8")
    # an earlier split's split.json would otherwise vouch for a half-replaced set of files
    (out / "split.json").unlink(missing_ok=True)
    write_lines(out / "corpus.jsonl", [json.dumps(r, ensure_ascii=False) for r in reduced])
    corpus_hash = load_corpus(out / "corpus.jsonl").content_hash()
    parts = {}
    for part, ids in (("dev", split.incorpus_dev), ("test", split.incorpus_test)):
        records, hidden = hide_links(reduced, set(ids))
        path = part_corpus(out, part)
        write_lines(path, [json.dumps(r, ensure_ascii=False) for r in records])
        parts[part] = {"corpus_hash": load_corpus(path).content_hash(), "queries": len(ids), "hidden_links": hidden}

    inc = [{"qid": p, "paper_id": p, "split": "dev"} for p in split.incorpus_dev]
    inc += [{"qid": p, "paper_id": p, "split": "test"} for p in split.incorpus_test]
    inc.sort(key=lambda r: r["qid"])
    ooc = [{"qid": p, "paper_id": p, "title": by_id[p]["title"], "abstract": by_id[p]["abstract"],
            "year": by_id[p]["year"]} for p in split.ooc]
    survey = [{"qid": p, "paper_id": p, "title": by_id[p]["title"], "abstract": by_id[p]["abstract"],
               "year": by_id[p]["year"], "n_references": len(split.gold["survey"][p]), "split": part}
              for part, ids in (("test", split.survey), ("dev", split.survey_dev)) for p in ids]
    for suite, rows in (("incorpus", inc), ("ooc", ooc), ("survey", survey)):
        write_lines(out / suite / "queries.jsonl", [json.dumps(r, ensure_ascii=False) for r in rows])
        write_qrels(out / suite / "qrels.txt", split.gold[suite])
    for part, ids in (("dev", split.incorpus_dev), ("test", split.incorpus_test)):
        # one part's qrels: `graft eval score` of a part's run then gives the part's table figures
        write_qrels(out / "incorpus" / f"qrels.{part}.txt", {q: split.gold["incorpus"][q] for q in ids})

    def qrel_count(suite: str) -> int:
        return sum(len(v) for v in split.gold[suite].values())

    meta = {
        "format": SPLIT_FORMAT,
        "format_version": SPLIT_VERSION,
        "seed": config.seed,
        "source": str(corpus),
        "source_hash": loaded.content_hash(),
        "corpus_hash": corpus_hash,
        "counts": {
            "source_papers": loaded.papers.height,
            "corpus_papers": len(split.kept),
            "incorpus_dev": len(split.incorpus_dev),
            "incorpus_test": len(split.incorpus_test),
            "incorpus_qrels": qrel_count("incorpus"),
            "ooc": len(split.ooc),
            "ooc_qrels": qrel_count("ooc"),
            "survey": len(split.survey),
            "survey_dev": len(split.survey_dev),
            "survey_qrels": qrel_count("survey"),
            "skipped_records": len(loaded.report.skipped),
            "citation_links": sum(len(r["references"]) for r in reduced),
            "incorpus_dev_hidden_links": parts["dev"]["hidden_links"],
            "incorpus_test_hidden_links": parts["test"]["hidden_links"],
        },
        "incorpus_parts": parts,
        "params": asdict(config),
        "command": command or " ".join(["graft", *sys.argv[1:]]),
        "created": now_iso(),
        "versions": library_versions(),
    }
    write_json(out / "split.json", meta)
    (out / IN_PROGRESS).unlink()
    return meta


# ---- reading a split directory -----------------------------------------------------------------
def part_corpus(split_dir: str | Path, part: str) -> Path:
    """The leak-free corpus of an in-corpus part: `SPLITDIR/incorpus/{part}/corpus.jsonl`."""
    return Path(split_dir) / "incorpus" / part / "corpus.jsonl"


def part_index(split_dir: str | Path, part: str) -> Path:
    """The evaluation index of an in-corpus part: `SPLITDIR/incorpus/{part}/index`."""
    return Path(split_dir) / "incorpus" / part / "index"


def split_indexes(split_dir: str | Path) -> list[tuple[str, Path, Path]]:
    """(name, corpus, index) of every index a split is evaluated on, in build order: `SPLITDIR/index`
    (out-of-corpus, survey and coverage suites), then each in-corpus part's leak-free index."""
    split_dir = Path(split_dir)
    return [("index", split_dir / "corpus.jsonl", split_dir / "index"),
            *((f"incorpus {part}", part_corpus(split_dir, part), part_index(split_dir, part)) for part in PARTS)]


def build_split_indexes(split_dir: str | Path, config: Any = None, *, cache_from: str | Path | None = None,
                        force: bool = False, reporter: Any = None, encoder: Any = None,
                        on_index: Any = None) -> list[Path]:
    """Build every index of a split (`split_indexes`) that is not up to date: `SPLITDIR/index`
    first (seeded from `cache_from` when given), then each in-corpus part's leak-free index seeded
    from it, so that only their graphs are made again.

    Args:
        split_dir: a split directory from `prepare_split`.
        config: a `graphbuild.build.BuildConfig` (its defaults when None), the same for every index.
        cache_from: an index whose stored facets and vectors the first build copies.
        force: rebuild indexes already built from their corpus with `config`.
        reporter: progress of the builds; encoder: a loaded encoder to share (tests).
        on_index: called with (name, index folder, built) for each index.
    Returns:
        The index folders, in build order.
    Raises:
        GraftError: not a split; the builds' own errors.
    """
    from graft.config import config_to_dict
    from graphbuild.build import BuildConfig, build_index

    read_split(split_dir)
    config = config or BuildConfig()
    seed = cache_from
    out = []
    for name, corpus, index in split_indexes(split_dir):
        built = force or not _up_to_date(index, load_corpus(corpus).content_hash(), config_to_dict(config))
        if built:
            build_index(corpus, index, config, reporter=reporter, encoder=encoder, cache_from=seed)
        if on_index is not None:
            on_index(name, index, built)
        seed = Path(split_dir) / "index"  # the parts share its facets and vectors
        out.append(index)
    return out


def _up_to_date(index: Path, corpus_hash: str, config: dict[str, Any]) -> bool:
    """Whether `index` is a finished build of the corpus with hash `corpus_hash` under `config`."""
    try:
        manifest = read_json(index / "manifest.json")
        build = manifest["stages"]["build"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return (manifest.get("corpus_hash") == corpus_hash and not manifest.get("in_progress")
            and build.get("config") == config)


def expected_corpus_hash(meta: dict[str, Any], part: str | None) -> str:
    """The corpus hash an index must have been built from: the split's (`part` None) or an
    in-corpus part's leak-free corpus."""
    return meta["corpus_hash"] if part is None else meta["incorpus_parts"][part]["corpus_hash"]



def read_split(split_dir: str | Path) -> dict[str, Any]:
    """split.json of a split directory.

    Raises:
        GraftError: not a split directory (names the command that makes one).
    """
    path = Path(split_dir) / "split.json"
    if not path.is_file() and (Path(split_dir) / IN_PROGRESS).is_file():
        raise GraftError(f"'{split_dir}': `graft eval prepare` was stopped while writing this split; run it again "
                         f"(`graft eval prepare CORPUS --out {split_dir}`)")
    if not path.is_file():
        raise GraftError(f"'{split_dir}' is not an evaluation split (no split.json); make one with "
                         f"`graft eval prepare CORPUS --out {split_dir}`")
    try:
        meta = read_json(path)
    except (ValueError, OSError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise GraftError(f"{path}: cannot be read as JSON ({exc}); re-run `graft eval prepare CORPUS --out "
                         f"{split_dir}`") from None
    if not isinstance(meta, dict):
        raise GraftError(f"{path}: expected a JSON object, got {type(meta).__name__}; re-run `graft eval prepare "
                         f"CORPUS --out {split_dir}`")
    if meta.get("format") != SPLIT_FORMAT or meta.get("format_version") != SPLIT_VERSION:
        older = meta.get("format") == SPLIT_FORMAT and meta.get("format_version") == 1
        raise GraftError(f"{path}: split format {meta.get('format')!r} v{meta.get('format_version')} is not "
                         f"{SPLIT_FORMAT!r} v{SPLIT_VERSION}" + (
                             " (a split of the old in-corpus protocol, whose index holds the queries' gold links)"
                             if older else "") + "; re-run `graft eval prepare`")
    return meta


def read_queries(split_dir: str | Path, suite: str, *, part: str | None = None) -> list[dict[str, Any]]:
    """The query records of one suite, all of them or those of one part ("dev" or "test").

    Out-of-corpus queries have no parts (a part keeps them all); survey hold-outs written before
    the survey dev part existed count as test.
    """
    if suite not in SPLIT_SUITES:
        raise GraftError(f"unknown split suite {suite!r}; allowed: {', '.join(SPLIT_SUITES)}")
    path = Path(split_dir) / suite / "queries.jsonl"
    if not path.is_file():
        raise GraftError(f"{path} is missing; re-run `graft eval prepare CORPUS --out {split_dir}`")
    rows = []
    for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = loads(line, f"{path} line {n}")
        except ValueError as exc:
            row = exc
        if not (isinstance(row, dict) and all(isinstance(row.get(k), str) and row[k].strip()
                                              for k in ("qid", "paper_id"))):
            problem = (f"invalid JSON ({row})" if isinstance(row, Exception)
                       else "not a query record with a 'qid' and a 'paper_id'")
            raise GraftError(f"{path} line {n}: {problem}; re-run `graft eval prepare CORPUS --out {split_dir}`")
        rows.append(row)
    if part is not None:
        if part not in ("dev", "test"):
            raise GraftError(f"unknown part {part!r}; allowed: dev, test")
        if suite != "ooc":
            rows = [r for r in rows if r.get("split", "test") == part]
    return rows
