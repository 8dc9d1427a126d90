"""`graft build --engine ray` on a small local Ray cluster: the index it writes is the local build's
though a worker node is lost mid-build, and a rerun after a killed driver resumes from the finished
stages and writes it too (one test: each Ray start costs seconds)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
import scipy.sparse as sp
from conftest import REPO, cs768_path

ray = pytest.importorskip("ray", reason="the Ray engine's tests need Ray: pip install -e '.[ray]'")

from graft.facets import FACETS  # noqa: E402
from graphbuild.build import BuildConfig, build_index  # noqa: E402
from graphbuild.ray_engine import RaySettings, build_index_ray  # noqa: E402

pytestmark = pytest.mark.slow

N_PAPERS = 50
CONFIG = BuildConfig()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """50 real cs768 papers with links among them: the 15 most cited and the 35 citing most of them."""
    import gzip
    from collections import Counter

    records = [json.loads(line) for line in gzip.open(cs768_path(), "rt")]
    cited = Counter(r for rec in records for r in rec["references"])
    core = {p for p, _ in cited.most_common(15)}
    citing = sorted((r for r in records if r["id"] not in core),
                    key=lambda r: (-len(set(r["references"]) & core), r["id"]))[: N_PAPERS - 15]
    keep = core | {r["id"] for r in citing}
    path = tmp_path_factory.mktemp("ray-corpus") / "corpus.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records if r["id"] in keep))
    return path


@pytest.fixture(scope="module")
def local_index(tmp_path_factory, corpus, encoder) -> Path:
    out = tmp_path_factory.mktemp("ray") / "local"
    build_index(corpus, out, CONFIG, encoder=encoder)
    return out


def same_index(got: Path, want: Path, *, vector_atol: float = 1e-3) -> dict[str, float]:
    """Tables equal; vectors equal but for float rounding (stored as float16: 1e-3); per facet the share of the local graph's
    edges the other holds (1.0 where the vectors are equal to the bit)."""
    for name in ("papers.parquet", "facets.parquet", "citations.parquet"):
        assert pl.read_parquet(got / name).equals(pl.read_parquet(want / name)), name
    for name in ("items.npy", "papers.npy"):
        a, b = np.load(got / "embeddings" / name), np.load(want / "embeddings" / name)
        assert a.shape == b.shape and float(np.abs(a.astype(np.float32) - b.astype(np.float32)).max()) <= vector_atol
    shares = {}
    for facet in (*FACETS, "citation"):
        a, b = sp.load_npz(got / "graph" / f"{facet}.npz"), sp.load_npz(want / "graph" / f"{facet}.npz")
        shares[facet] = (a != 0).multiply(b != 0).nnz / max(b.nnz, 1)
    m_got, m_want = (json.loads((p / "manifest.json").read_text()) for p in (got, want))
    assert m_got["corpus_hash"] == m_want["corpus_hash"]
    assert m_got["stages"]["build"]["counts"]["engine"] == "ray"
    return shares


def test_a_lost_worker_node_and_a_killed_driver_change_nothing(corpus, local_index, tmp_path) -> None:
    from ray.cluster_utils import Cluster

    # a head without CPUs and three worker nodes: the per-paper actors and graph tasks run on the workers;
    # one of them is removed mid-build, two remain
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    nodes = [cluster.add_node(num_cpus=1) for _ in range(3)]
    cluster.wait_for_nodes()
    out = tmp_path / "lost-node"
    try:
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        papers_dir = out / "cache" / "ray" / "papers"

        killed: list[str] = []

        def kill_when_busy() -> None:
            deadline = time.time() + 300
            while time.time() < deadline and not (papers_dir.is_dir() and any(papers_dir.iterdir())):
                time.sleep(0.5)
            cluster.remove_node(nodes[0], allow_graceful=False)  # a node dies mid-build
            killed.append("before the index was written" if not (out / "manifest.json").exists() else "too late")

        import threading

        killer = threading.Thread(target=kill_when_busy, daemon=True)
        killer.start()
        build_index_ray(corpus, out, CONFIG, settings=RaySettings(shard_papers=20, batch_papers=10, actors=1))
        killer.join(timeout=60)
        assert killed == ["before the index was written"]
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert min(same_index(out, local_index).values()) >= 0.99

    # a driver killed in the per-paper stage: the rerun keeps the finished shards and papers
    resumed = tmp_path / "resumed"
    code = ("import sys; from graphbuild.build import BuildConfig; from graphbuild.ray_engine import RaySettings, "
            "build_index_ray; build_index_ray(sys.argv[1], sys.argv[2], BuildConfig(), "
            "settings=RaySettings(local_cpus=2, shard_papers=20, batch_papers=10, actors=1))")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", code, str(corpus), str(resumed)], env=env,
                            start_new_session=True)
    papers_dir = resumed / "cache" / "ray" / "papers"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None and not (papers_dir.is_dir() and any(papers_dir.iterdir())):
        time.sleep(0.5)
    assert proc.poll() is None, "the build ended before the per-paper stage wrote a shard"
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and the local Ray it started
    proc.wait()
    subprocess.run([sys.executable, "-m", "ray.scripts.scripts", "stop", "--force"], capture_output=True)
    kept = {p.name: p.stat().st_mtime_ns for p in papers_dir.iterdir() if p.suffix == ".parquet"}
    shards = {p.name: p.stat().st_mtime_ns for p in (resumed / "cache" / "ray" / "shards").glob("part-*.parquet")}
    assert kept and len(shards) == 3
    summary = build_index_ray(corpus, resumed, CONFIG,
                              settings=RaySettings(local_cpus=2, shard_papers=20, batch_papers=10, actors=1))
    assert summary.counts["papers"] == N_PAPERS and not ray.is_initialized()  # the local Ray it started is gone
    assert {n: (papers_dir / n).stat().st_mtime_ns for n in kept} == kept  # finished shards not redone
    assert {p.name: p.stat().st_mtime_ns for p in (resumed / "cache" / "ray" / "shards").glob("part-*.parquet")} \
        == shards
    assert sorted(p.name for p in papers_dir.iterdir()) == [
        "part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]  # 20 + 20 + 10 papers
    shares = same_index(resumed, local_index)
    assert shares["citation"] == 1.0 and min(shares.values()) >= 0.99, shares


def test_the_ray_per_paper_stage_reads_items_in_context_as_the_local_build(corpus, tmp_path, encoder) -> None:
    """Item context "late" on the Ray path: the per-paper actor's results (run here without a
    cluster) give the items the vectors the local build gives them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from graphbuild.ray_engine import PaperWorker, read_paper_work

    config = BuildConfig(item_context="late", embedding_backend="torch")
    build_index(corpus, tmp_path / "local", config, encoder=encoder)
    papers = pl.read_ndjson(corpus).select(pl.col("id").alias("paper_id"), "title", "abstract")
    batch = papers.with_columns(pl.lit(None, dtype=pl.Utf8).alias("full_text"),
                                pl.lit("part-00000.parquet").alias("path")).to_arrow()
    out = PaperWorker(config, str(tmp_path / "ray"), 2)(batch)
    assert isinstance(out, pa.Table) and out.num_rows == N_PAPERS
    pq.write_table(out.drop_columns(["path"]), tmp_path / "part.parquet")
    work = read_paper_work([tmp_path / "part.parquet"], config)
    assert work.context is not None and work.context.shape == work.alone.shape
    assert (np.abs(work.context).sum(axis=1) > 0).mean() > 0.9
    local = np.load(tmp_path / "local" / "embeddings" / "items.npy").astype(np.float32)
    from graft.encoder import read_or_alone, with_title

    owner = {p: i for i, p in enumerate(papers["paper_id"].to_list())}
    rows = np.array([owner[p] for p in work.table["paper_id"].to_list()])
    got = with_title(read_or_alone(work.context, work.alone), work.titles[rows], config.title_weight)
    np.testing.assert_allclose(got, local, atol=2e-3)
