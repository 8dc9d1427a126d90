"""An index's arrays are validated, not trusted: a damaged artefact (out-of-range indices, NaN,
another dtype or shape, a truncated file) is an error naming the file, never a crash or a silently
wrong answer. The fuzz test runs each query in a subprocess, so a segmentation fault is a failure."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from conftest import REPO, cached_folder
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from graft.errors import IndexFormatError
from graft.index import Index

#: What the probe does with an index: the teacher's answer for two corpus papers (graphs, citation
#: links, papers), the nearest papers of paper 0 by its stored vector and the nearest items of item 0
#: (embeddings, facets). A GraftError is answered as exit 2 with its message; anything else ends the
#: process (a crash). It serves one index folder per line of stdin, one JSON line each, so the
#: libraries are imported once for the whole fuzz test.
PROBE = """
import json, sys
import numpy as np
from graft.errors import GraftError
from graft.index import Index

def answer(path):
    out = []
    idx = Index.open(path)
    for pid in idx.paper_ids[:2]:
        res = idx.query(paper=pid, retriever="teacher", k=5)
        out.append(f"{pid} {[(h.paper_id, round(h.score, 5)) for h in res.hits]}")
    papers = np.asarray(idx.paper_embeddings, dtype=np.float32)
    out.append(f"papers {np.argsort(-(papers @ papers[0]), kind='stable')[:5].tolist()}")
    for vectors in (idx.item_embeddings, idx.item_text_embeddings):
        vectors = np.asarray(vectors, dtype=np.float32)
        near = np.argsort(-(vectors @ vectors[0]), kind="stable")[:5]
        out.append(f"items {idx.item_rows[near].tolist()} {idx.facets['facet'][0]}")
    out.append(f"links {idx.citation_links.nnz} {idx.text_coupling.nnz} {idx.citation_score.nnz}")
    return "\\n".join(out)

for line in sys.stdin:
    try:
        reply = {"rc": 0, "out": answer(line.strip())}
    except GraftError as exc:
        reply = {"rc": 2, "err": str(exc)}
    print(json.dumps(reply), flush=True)
"""


class Probe:
    """The probe in its own process, started again after a crash."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def __call__(self, index: Path) -> tuple[int, str]:
        """(0, the answer) or (2, the error's message); (the exit status, stderr) after a crash."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, "-c", PROBE], cwd=REPO, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{index}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:  # the process died: a segmentation fault, an uncaught exception
            rc = self.proc.wait(timeout=60)
            stderr = self.proc.stderr.read() if self.proc.stderr else ""
            self.proc = None
            return rc, stderr
        reply = json.loads(line)
        return reply["rc"], reply.get("out") or reply.get("err", "")

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()  # type: ignore[union-attr]
            self.proc.wait(timeout=60)


GRAPHS = ["graph/problem.npz", "graph/method.npz", "graph/result.npz", "graph/contribution.npz",
          "graph/citation.npz", "graph/text.npz"]
VECTORS = ["embeddings/items.npy", "embeddings/items_alone.npy", "embeddings/papers.npy"]
TABLES = ["papers.parquet", "facets.parquet", "citations.parquet"]


@pytest.fixture(scope="module")
def tiny(request, tmp_path_factory, encoder) -> Path:
    """An 8-paper ACLSum index (heuristic facets, text coupling, titles in the item vectors) in which
    the first paper cites the next three."""
    from graphbuild.build import BuildConfig, build_index
    from graphbuild.corpus import load_corpus

    folder = tmp_path_factory.mktemp("artefacts-corpus")
    rows = load_corpus(None, limit=8).papers.to_dicts()
    rows[0]["references"] = [r["paper_id"] for r in rows[1:4]]
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": r["paper_id"], "title": r["title"], "abstract": r["abstract"],
                                          "references": r.get("references") or []}) + "\n" for r in rows))

    def make(out: Path) -> None:
        build_index(corpus, out / "idx", BuildConfig(), encoder=encoder)

    return cached_folder(request, tmp_path_factory, "artefacts-index", [corpus, repr(BuildConfig())], make) / "idx"


@pytest.fixture(scope="module")
def probe():
    running = Probe()
    yield running
    running.close()


@pytest.fixture(scope="module")
def answer(tiny, probe) -> str:
    rc, out = probe(tiny)
    assert rc == 0, out
    return out


_copies = iter(range(10**9))


def copy_of(index: Path, folder: Path) -> Path:
    """A copy of the index (without its build stores) in a folder of its own."""
    out = folder / f"idx{next(_copies)}"
    shutil.copytree(index, out, ignore=shutil.ignore_patterns("cache"))
    return out


def test_a_graph_with_a_column_index_past_n_is_an_error_naming_the_file(tiny, tmp_path) -> None:
    """The failure that crashed the process (scipy read past its arrays: exit 139) through
    `graft query`: now exit 2 and one line naming the file and the index."""
    index = copy_of(tiny, tmp_path)
    path = index / "graph" / "method.npz"
    arrays = dict(np.load(path))
    arrays["indices"] = np.full_like(arrays["indices"], 1_000_000)
    np.savez(path, **arrays)
    paper = Index.open(index).paper_ids[0]
    res = subprocess.run([sys.executable, "-m", "cli.app", "query", str(index), "--paper", paper], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "graph/method.npz is damaged: it holds column index 1000000, outside [0, 8)" in res.stderr
    assert "Traceback" not in res.stderr


def test_nan_embeddings_are_an_error_not_zero_hits(tiny, tmp_path, encoder) -> None:
    """A text query against NaN paper vectors used to answer 0 hits without a word."""
    index = copy_of(tiny, tmp_path)
    path = index / "embeddings" / "papers.npy"
    vectors = np.load(path)
    vectors[3, 7] = np.nan
    np.save(path, vectors)
    searcher = Index.open(index).searcher(retriever="teacher", encoder=encoder)
    with pytest.raises(IndexFormatError, match=r"embeddings/papers.npy is damaged: row 3 is not finite"):
        searcher.text("Neural machine translation", "We translate sentences with an attention model.")


# ---- the fuzz test -------------------------------------------------------------------------------

def _truncate(path: Path, share: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * share)])


def mutate_graph(path: Path, kind: str, draw: st.DrawFn) -> None:
    if kind == "truncate":
        return _truncate(path, draw(st.floats(0, 0.99)))
    arrays = dict(np.load(path))
    n = int(arrays["shape"][0])
    nnz = len(arrays["indices"])
    at = draw(st.integers(0, max(nnz - 1, 0)))
    if kind == "range" and nnz:
        arrays["indices"] = arrays["indices"].astype(np.int64)
        arrays["indices"][at] = draw(st.integers(-(2**40), -1) | st.integers(n, 2**40))
    elif kind == "indptr":  # a pointer out of order, or a start other than 0 or an end other than nnz
        ptr = arrays["indptr"] = arrays["indptr"].astype(np.int64)
        j, step = draw(st.integers(0, n)), draw(st.integers(1, 2**33))
        if 0 < j < n:
            ptr[j] = draw(st.sampled_from([ptr[j - 1] - step, ptr[j + 1] + step]))
        else:
            ptr[j] += draw(st.sampled_from([-step, step]))
    elif kind == "nan" and nnz:
        arrays["data"][at] = draw(st.sampled_from([np.nan, np.inf, -np.inf, -1.0, -1e-3]))
    elif kind == "dtype":
        name = draw(st.sampled_from(["indices", "indptr", "data"]))
        arrays[name] = arrays[name].astype(draw(st.sampled_from([np.float64, np.complex64, "U3", np.int8, np.bool_])))
    elif kind == "shape":
        grow = draw(st.integers(-n, 3).filter(lambda d: d != 0))
        arrays["shape"] = draw(st.sampled_from([np.array([n + grow, n + grow]), np.array([n, n + grow]),
                                                np.array([n]), np.array([[n, n]])]))
    elif kind == "drop":
        arrays.pop(draw(st.sampled_from(sorted(arrays))))
    np.savez(path, **arrays)


def mutate_vectors(path: Path, kind: str, draw: st.DrawFn) -> None:
    if kind == "truncate":
        return _truncate(path, draw(st.floats(0, 0.99)))
    a = np.load(path)
    if kind in ("nan", "range"):
        a[draw(st.integers(0, a.shape[0] - 1)), draw(st.integers(0, a.shape[1] - 1))] = \
            draw(st.sampled_from([np.nan, np.inf, -np.inf]))
    elif kind == "dtype":
        a = a.astype(draw(st.sampled_from([np.int8, np.float64, np.complex64, np.bool_, "U4"])))
    elif kind == "shape":
        a = draw(st.sampled_from([a[:-1], a[:, :-1], a.ravel(), a[None], np.concatenate([a, a[:1]]), a.T]))
    np.save(path, a)


def mutate_table(path: Path, kind: str, draw: st.DrawFn) -> None:
    if kind == "truncate":
        return _truncate(path, draw(st.floats(0, 0.99)))
    df = pl.read_parquet(path)
    column = draw(st.sampled_from(df.columns))
    row = draw(st.integers(0, max(df.height - 1, 0)))
    if kind == "drop":
        df = df.drop(column)
    elif kind == "dtype":
        df = df.with_columns(pl.lit("1").alias(column) if df[column].dtype != pl.String
                             else pl.col(column).str.len_bytes())
    elif kind == "nan":  # an empty value
        df = df.with_columns(pl.when(pl.int_range(pl.len()) == row).then(None).otherwise(pl.col(column))
                             .alias(column))
    elif kind in ("range", "shape"):  # a value naming no paper or facet
        value = draw(st.sampled_from(["nope", ""])) if df[column].dtype == pl.String else None
        df = df.with_columns(pl.when(pl.int_range(pl.len()) == row).then(pl.lit(value, dtype=df[column].dtype))
                             .otherwise(pl.col(column)).alias(column))
    df.write_parquet(path)


KINDS = {"graph": ["range", "indptr", "nan", "dtype", "shape", "drop", "truncate"],
         "vectors": ["nan", "dtype", "shape", "truncate"],
         "table": ["range", "nan", "dtype", "drop", "truncate"]}


@settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.generate])  # no shrinking: each example costs a copy of the index
@given(rel=st.sampled_from(GRAPHS + VECTORS + TABLES), data=st.data())
def test_any_damaged_artefact_is_an_error_naming_it_or_the_right_answer(tiny, probe, answer, tmp_path, rel,
                                                                         data) -> None:
    """Each artefact damaged in its shape, dtype, range or values (NaN, inf, negative weights, empty
    values) or cut short: the probe answers as on the intact index, or exits 2 naming the file."""
    family = "graph" if rel in GRAPHS else "vectors" if rel in VECTORS else "table"
    kind = data.draw(st.sampled_from(KINDS[family]), label="kind")
    index = copy_of(tiny, tmp_path)
    mutate = {"graph": mutate_graph, "vectors": mutate_vectors, "table": mutate_table}[family]
    mutate(index / rel, kind, data.draw)
    rc, out = probe(index)
    shutil.rmtree(index)
    if rc == 0:
        assert out == answer, f"{rel} ({kind}): another answer, without an error"
    else:
        assert rc == 2, f"{rel} ({kind}): crashed with exit {rc}:\n{out[-3000:]}"
        assert f"{rel} " in out, out[-3000:]


def test_the_probe_reads_each_artefact(tiny, probe, answer, tmp_path) -> None:
    """The fuzz test's probe reads every artefact it damages (an emptied file is an error naming it),
    and the tiny index has something in each (citation links included)."""
    assert "links 0 " not in answer and " 0 0\n" not in answer + "\n"
    for rel in GRAPHS + VECTORS + TABLES:
        index = copy_of(tiny, tmp_path)
        (index / rel).write_bytes(b"")
        rc, out = probe(index)
        assert rc == 2 and rel in out, (rel, out[-2000:])



def test_a_models_docid_tables_are_checked_against_the_index(tiny, tmp_path, torch_one_thread) -> None:
    """DocIDs numbered out of order, naming papers the index lacks, or items naming DocIDs that do not
    exist: an error naming the file when the model loads, not a wrong paper or an exception deep in
    decoding."""
    from training.pipeline import train_index
    from training.trainer import TrainConfig

    trained = copy_of(tiny, tmp_path)
    train_index(trained, TrainConfig(max_steps=1, save_every_steps=0, logging_steps=1), base_model="tiny",
                check_pairs=0)
    assert Index.open(trained).generative().docids.docids.height
    docids = pl.read_parquet(trained / "docids" / "docids.parquet")
    items = pl.read_parquet(trained / "docids" / "items.parquet")
    damages = {
        "docids.parquet": [
            (docids.with_columns(pl.col("docid_id") + 1), r"the \w+ DocIDs are numbered 1\.\.\d+ .*not 0\.\."),
            (docids.with_columns(pl.col("paper_ids").list.concat(pl.lit(["nope"]))),
             "a DocID names paper 'nope', which papers.parquet lacks"),
            (docids.drop("paper_ids"), "lacks the column 'paper_ids'"),
        ],
        "items.parquet": [
            (items.with_columns(pl.col("docid_id") + 10**6), r"names \w+ DocID \d+, which docids.parquet lacks"),
            (items.with_columns(pl.lit("nope").alias("paper_id")), "an item names paper 'nope'"),
        ],
    }
    for name, cases in damages.items():
        for frame, message in cases:
            index = copy_of(trained, tmp_path)
            frame.write_parquet(index / "docids" / name)
            with pytest.raises(IndexFormatError, match=f"docids/{name} is damaged: .*{message}"):
                Index.open(index).generative()
    index = copy_of(trained, tmp_path)
    (index / "docids" / "docids.parquet").write_bytes(b"PAR1")
    with pytest.raises(IndexFormatError, match="docids.parquet cannot be read"):
        Index.open(index).generative()
