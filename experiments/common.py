"""What the experiments share: their command-line boilerplate, the split and index options of those
over a split's in-corpus queries, and the tables they write (Markdown + JSON under docs/results).

Every experiment runs from the repository root as `python -m experiments.NAME`; nothing here or in
them changes `sys.path`. Importing this module keeps Hugging Face offline (`HF_HUB_OFFLINE=1` unless
set).
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: Where the tables go unless `--results` says otherwise.
RESULTS = REPO / "docs" / "results"
#: The cs768 corpus beside the repository (the default of the experiments that build from a corpus).
CS768 = REPO.parent / "shared" / "data" / "cs768" / "papers.jsonl.gz"

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def parser(doc: str | None, **kwargs: Any) -> argparse.ArgumentParser:
    """An experiment's parser, described by its module docstring's first paragraph."""
    return argparse.ArgumentParser(description=" ".join((doc or "").split("\n\n")[0].split()), **kwargs)


def add_results_argument(ap: argparse.ArgumentParser) -> None:
    """--results: the tables' folder (default docs/results)."""
    ap.add_argument("--results", default=str(RESULTS), help="folder of the tables (default: docs/results)")


def add_split_arguments(ap: argparse.ArgumentParser, *, table: str, part: str) -> None:
    """--split, --index, --part, --limit, --name and --results of a benchmark over a split's queries.

    Args:
        ap: the parser to extend.
        table: the table's file-name stem (`{table}_{name}.md`).
        part: the default in-corpus part (dev for tuning, test for reported tables).
    """
    ap.add_argument("--split", required=True, help="split directory (graft eval prepare + graft build)")
    ap.add_argument("--index", default=None, help="index directory (default: the part's leak-free index, "
                    "SPLITDIR/incorpus/PART/index)")
    ap.add_argument("--part", default=part, choices=("dev", "test"), help="in-corpus queries: dev or test")
    ap.add_argument("--limit", type=int, default=None, help="only the first N queries by qid")
    ap.add_argument("--name", default=None, help=f"table name: {table}_{{name}}.md (default: the corpus)")
    add_results_argument(ap)


def split_parser(doc: str | None, *, table: str, part: str) -> argparse.ArgumentParser:
    """`parser` with `add_split_arguments`: the parser of an experiment over a split's queries."""
    ap = parser(doc)
    add_split_arguments(ap, table=table, part=part)
    return ap


def int_list(ap: argparse.ArgumentParser, text: str, flag: str, *, required: bool = True) -> list[int]:
    """An option's comma-separated integers >= 1, in the order given; anything else is a usage error
    (`ap.error`), and so is an empty list when `required`."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = [0]
    if any(v < 1 for v in values) or (not values and (required or text.strip())):
        ap.error(f"{flag} takes comma-separated integers >= 1, got {text!r}")
    return values


def float_list(ap: argparse.ArgumentParser, text: str, flag: str) -> list[float]:
    """An option's comma-separated numbers in [0, 1], in the order given, each once; anything else
    (or none) is a usage error."""
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = [-1.0]
    if not values or any(not 0 <= v <= 1 for v in values):
        ap.error(f"{flag} takes comma-separated numbers in [0, 1], got {text!r}")
    return list(dict.fromkeys(values))


@dataclass
class SplitQueries:
    """A split's in-corpus queries that have gold, with the index they are asked of."""

    split: dict[str, Any]  # split.json
    index_dir: Path
    index: Any  # graft.index.Index
    queries: list[Any]  # eval.systems.EvalQuery, by qid
    gold: dict[str, set[int]]  # qid -> gold corpus rows

    @property
    def rows(self) -> dict[str, int]:
        """qid -> the query paper's corpus row."""
        return {q.qid: self.index.row_of[q.paper_id] for q in self.queries}


def open_split_queries(args: argparse.Namespace, *, paper_embeddings: bool = False) -> SplitQueries:
    """The split, index and in-corpus queries named by `add_split_arguments`' options.

    Raises:
        SystemExit: with `paper_embeddings`, an index built before `embeddings/papers.npy` (the
            message says to rebuild it).
    """
    from eval.runner import load_queries
    from eval.splits import part_index, read_split
    from eval.trec import read_qrels
    from graft.index import Index

    split_dir = Path(args.split)
    split = read_split(split_dir)
    index_dir = Path(args.index) if args.index else part_index(split_dir, args.part)
    idx = Index.open(index_dir)
    if paper_embeddings and idx.paper_embeddings is None:
        raise SystemExit(f"{index_dir} has no embeddings/papers.npy: rebuild it with `graft build`")
    qrels = read_qrels(split_dir / "incorpus" / "qrels.txt")
    queries = [q for q in load_queries(split_dir, "incorpus", args.part, args.limit) if qrels.get(q.qid)]
    gold = {q.qid: {idx.row_of[p] for p in qrels[q.qid] if p in idx.row_of} for q in queries}
    return SplitQueries(split, index_dir, idx, queries, gold)


def split_report(opened: SplitQueries, args: argparse.Namespace, module: str, argv: list[str] | None, title: str,
                 about: str, **extra: Any) -> tuple[str, dict[str, Any], list[str]]:
    """What every split benchmark's table starts with: its name, its meta record and its heading.

    Args:
        opened: the split's queries (`open_split_queries`).
        args: the parsed options (`add_split_arguments`: `name`, `part`).
        module: the benchmark's module under `experiments` (for the command line).
        argv: the arguments `main` was given (None: the process's).
        title: the table's title; the name is appended.
        about: the date line's rest after "N in-corpus PART" ("papers · ...").
        extra: more meta fields.
    Returns:
        (name: `args.name` or the corpus's, meta: command, date, corpus hash, index, queries, part
        and `extra`, lines: the Markdown heading, command and date lines, then a blank line).
    """
    import datetime as dt
    import sys

    from eval.runner import corpus_name

    name = args.name or corpus_name(opened.split)
    command = f"python -m experiments.{module} " + " ".join(argv if argv is not None else sys.argv[1:])
    meta = {"command": command, "date": dt.date.today().isoformat(), "corpus_hash": opened.split.get("corpus_hash"),
            "index": str(opened.index_dir), "queries": len(opened.rows), "part": args.part, **extra}
    lines = [f"# {title} — {name}", "", f"Command: `{command}`  ",
             f"Date: {meta['date']} · corpus hash `{str(meta['corpus_hash'])[:16]}` · {len(opened.rows)} in-corpus "
             f"{args.part} {about}", ""]
    return name, meta, lines


def growth_exponent(n0: float, t0: float, n1: float, t1: float) -> float | None:
    """b of t ~ n^b through two measurements (n0, t0) and (n1, t1); None where it is undefined (a
    size or time not positive, or one size twice)."""
    if min(n0, n1, t0, t1) <= 0 or n0 == n1:
        return None
    return math.log(t1 / t0) / math.log(n1 / n0)


def write_tables(results_dir: str | Path, stem: str, meta: dict[str, Any], rows: list[dict[str, Any]],
                 lines: list[str]) -> None:
    """`{stem}.json` ({"meta", "rows"}) and `{stem}.md` (the Markdown `lines`) in `results_dir`; the
    Markdown is printed too."""
    import json

    results = Path(results_dir)
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{stem}.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    (results / f"{stem}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def load_embedding_cache(encoder: Any, path: str | Path | None) -> int:
    """Hand the sentence vectors stored at `path` (an .npz of `texts` and `vectors` written by
    `save_embedding_cache` with the same encoder) to `encoder`, so reruns embed only new texts.
    Returns the number of vectors loaded (0 when there is no file)."""
    import numpy as np

    if path is None or not Path(path).exists():
        return 0
    data = np.load(path, allow_pickle=False)
    if str(data["encoder"]) != str(getattr(encoder, "name", "")):
        return 0
    texts = [str(t) for t in data["texts"]]
    encoder.remember(texts, data["vectors"])
    return len(texts)


def save_embedding_cache(encoder: Any, path: str | Path | None, texts: list[str]) -> None:
    """Store `texts` and their vectors (served from the encoder's memo) at `path` for the next run."""
    import numpy as np

    if path is None:
        return
    texts = list(dict.fromkeys(texts))
    np.savez(path, texts=np.asarray(texts, dtype=str), vectors=encoder.encode(texts),
             encoder=np.asarray(str(getattr(encoder, "name", ""))))


def copy_split_queries(split: str | Path, target: str | Path, *, corpora: bool = False) -> Path:
    """A copy of a split's query and gold files with a runs folder of its own (only the nearest-paper
    sets, `runs/*.obvious.json`, are copied into it), so that an experiment's runs never replace the
    split's; indexes and tables stay behind, and the corpora too unless `corpora` (to build the
    copy's own indexes with other settings). An existing copy is kept."""
    split, target = Path(split), Path(target)
    if (target / "split.json").is_file():
        return target
    left = ("index", "runs", "results") if corpora else ("index", "corpus.jsonl", "runs", "results")
    shutil.copytree(split, target, ignore=shutil.ignore_patterns(*left))
    (target / "runs").mkdir(exist_ok=True)
    for f in (split / "runs").glob("*.obvious.json"):
        shutil.copy2(f, target / "runs" / f.name)
    return target
