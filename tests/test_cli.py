"""The `graft` command line through Typer's CliRunner, on a real cs768 slice."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path

import networkx as nx
import numpy as np
import polars as pl
import pytest
from conftest import REPO, cached_folder, cs768_path
from test_build import write_slice
from typer.testing import CliRunner

from cli.app import app
from graft.errors import GraftError
from graft.query import QueryConfig

runner = CliRunner()


@pytest.fixture(scope="module")
def built(request, tmp_path_factory):
    """`graft build --json` of an 80-paper cs768 slice: the index and its summary (kept in pytest's
    cache: `cached_folder`)."""
    tmp = tmp_path_factory.mktemp("cli")
    corpus = write_slice(cs768_path(), 80, tmp)

    def make(folder: Path) -> None:
        # without text coupling: on a slice this small most papers are link-less, and their text
        # neighbours would fill the rows the citation channel's tests walk (tested on its own elsewhere)
        res = runner.invoke(app, ["build", str(corpus), "--out", str(folder / "idx"), "--text-coupling", "0",
                                  "--json"])
        assert res.exit_code == 0, res.output
        (folder / "summary.json").write_text(res.stdout)

    folder = cached_folder(request, tmp_path_factory, "cli-build-80-tc0", [corpus], make)
    return folder / "idx", json.loads((folder / "summary.json").read_text())


def test_build_json_summary(built) -> None:
    out, summary = built
    assert summary["counts"]["papers"] == 80
    assert set(summary["counts"]["edges"]) == {"problem", "method", "result", "contribution"}
    assert (out / "manifest.json").is_file()


def test_info_shows_the_index_and_one_papers_edges(built) -> None:
    """`graft info`: the manifest's counts and settings; `--paper` the paper's facet items, citation
    links and heaviest out-edges per facet, as the stored graph holds them."""
    import numpy as np

    from graft.facets import FACETS
    from graft.index import Index

    out, summary = built
    res = runner.invoke(app, ["info", str(out), "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert got["papers"] == 80 and got["citations"] == summary["counts"]["citations"]
    assert {f: got["facets"][f]["edges"] for f in FACETS} == summary["counts"]["edges"]
    assert got["build"]["top_k"] == 20 and got["stages"] == ["build"] and "model" not in got
    table = runner.invoke(app, ["info", str(out)], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and "no trained model" in table.stdout and "method" in table.stdout
    assert "extractor_fallback" not in got and "heuristic extractor's items" not in table.stdout
    # an LLM build whose requests failed says so: its items are the heuristic extractor's
    import shutil

    llm = out.parent / "llm-fell-back"
    shutil.copytree(out, llm, ignore=shutil.ignore_patterns("cache"))
    manifest = json.loads((llm / "manifest.json").read_text())
    manifest["stages"]["build"]["config"]["extractor"] = "llm"
    manifest["stages"]["build"]["counts"]["extractor"] = {"papers": 80, "llm_ok": 70, "failed": 8, "discarded": 2,
                                                          "fallback": 10}
    (llm / "manifest.json").write_text(json.dumps(manifest))
    fell = runner.invoke(app, ["info", str(llm), "--json"])
    assert json.loads(fell.stdout)["extractor_fallback"] == {"papers": 80, "fallback": 10, "failed": 8,
                                                             "discarded": 2}
    fell = runner.invoke(app, ["info", str(llm)], env={"COLUMNS": "300"})
    assert fell.exit_code == 0 and "10 of 80 papers have the heuristic extractor's items" in fell.stdout
    # a training stopped before its final save: where it stopped, and the command that resumes it
    ckpt = llm / "model" / "checkpoints" / "step-500"
    ckpt.mkdir(parents=True)
    (ckpt / "trainer_state.json").write_text(json.dumps({
        "step": 500, "layout": {"total_steps": 1204}, "record": {"base_model": {"name": "/models/Llama 1B"},
                                                                  "sampling": "coverage",
                                                                  "distill": {"max_edges_per_source": 20}},
        "config": {"epochs": 2.0, "max_steps": None, "batch_size": 16, "lr": 5e-5, "seed": 0}}))
    got = json.loads(runner.invoke(app, ["info", str(llm), "--json"]).stdout)
    assert got["unfinished_model"]["step"] == 500 and "model" not in got
    cut = runner.invoke(app, ["info", str(llm)], env={"COLUMNS": "400"})
    assert f"unfinished model: its training stopped at step 500 of 1,204 (last checkpoint); queries use the graph " \
        f"teacher until `graft train {llm} --base-model '/models/Llama 1B' --sampling coverage --max-edges 20 --epochs 2.0 " \
        "--batch-size 16 --lr 5e-05` resumes and finishes it" in cut.stdout

    idx = Index.open(out)
    pid = idx.citations["cited"].value_counts().sort(["count", "cited"], descending=[True, False])["cited"][0]
    res = runner.invoke(app, ["info", str(out), "--paper", pid, "--k", "3", "--json"])
    assert res.exit_code == 0, res.output
    card = json.loads(res.stdout)
    assert card["facets"] == idx.paper_facets(pid)
    assert card["cited_by_in_corpus"] == int((idx.citations["cited"] == pid).sum()) > 0
    assert card["references_in_corpus"] == int((idx.citations["citing"] == pid).sum())
    c = idx.citations
    assert card["cited_by"] == sorted(c.filter(c["cited"] == pid)["citing"].to_list())  # the links, not just counts
    assert card["cites"] == sorted(c.filter(c["citing"] == pid)["cited"].to_list())
    for facet in FACETS:
        row = idx.graphs[facet].getrow(idx.row(pid))
        heaviest = np.sort(row.data)[::-1][:3]
        assert [e["weight"] for e in card["edges"][facet]] == pytest.approx(heaviest, abs=1e-4)
        for e in card["edges"][facet]:
            assert row[0, idx.row(e["paper_id"])] == pytest.approx(e["weight"], abs=1e-4)
    table = runner.invoke(app, ["info", str(out), "--paper", pid], env={"COLUMNS": "200"})
    assert table.exit_code == 0 and card["edges"]["method"][0]["paper_id"] in table.stdout
    shown = card["cited_by"][:12]
    assert f"cited by {len(card['cited_by'])} corpus paper(s): {', '.join(shown)}" in " ".join(table.stdout.split())
    bad = runner.invoke(app, ["info", str(out), "--paper", "no-such-paper"])
    assert bad.exit_code == 2 and "'no-such-paper' is not in index" in bad.output
    for empty in ("", "  "):
        bad = runner.invoke(app, ["info", str(out), "--paper", empty], env={"COLUMNS": "300"})
        assert bad.exit_code == 2 and "the paper id is empty" in bad.output and "similar ids" not in bad.output
    assert runner.invoke(app, ["info", str(out), "--k", "0"]).exit_code == 2


def test_query_json_and_table(built) -> None:
    out, _ = built
    from graft.index import Index

    idx = Index.open(out)
    pid = idx.paper_ids[3]
    res = runner.invoke(app, ["query", str(out), "--paper", pid, "--k", "5", "--json"])
    assert res.exit_code == 0, res.output
    hits = json.loads(res.stdout)["hits"]
    assert 0 < len(hits) <= 5
    for h in hits:
        assert {"paper_id", "title", "rank", "score", "facets"} <= set(h)
        assert h["facets"] and h["paper_id"] != pid
    res = runner.invoke(app, ["query", str(out), "--paper", pid, "--k", "5"], env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert hits[0]["paper_id"] in res.stdout
    assert any(f in res.stdout for f in ("problem 0.", "method 0.", "result 0.", "contribution 0."))
    assert all(e["match"] is None for h in hits for e in h["evidence"].values())
    narrow = runner.invoke(app, ["query", str(out), "--paper", pid, "--k", "5"], env={"COLUMNS": "60"})
    assert narrow.exit_code == 0 and all(h["paper_id"] in narrow.stdout for h in hits)  # ids never cut
    res = runner.invoke(app, ["query", str(out), "--paper", pid, "--k", "5", "--json", "--explain"])
    assert res.exit_code == 0, res.output
    explained = json.loads(res.stdout)["hits"]
    assert [h["paper_id"] for h in explained] == [h["paper_id"] for h in hits]
    matches = [(h["paper_id"], f, e["match"]) for h in explained for f, e in h["evidence"].items() if e["match"]]
    assert matches and all({"query", "hit", "cosine", "words"} == set(m) for _, _, m in matches)
    for hit_id, facet, m in matches:  # each side's item of that facet
        assert m["query"] in idx.paper_facets(pid)[facet] and m["hit"] in idx.paper_facets(hit_id)[facet]
    # and the words both papers use in that facet (title and items), as the lexical half compares them
    titles = dict(zip(idx.paper_ids, idx.paper_column("title").to_list()))
    with_words = 0
    for hit_id, facet, m in matches:
        for word in m["words"]:
            for paper in (pid, hit_id):
                text = " ".join([titles[paper], *idx.paper_facets(paper)[facet]]).lower()
                assert re.search(rf"\b{re.escape(word)}\b", text), (word, paper, facet)
        with_words += bool(m["words"])
        assert len(m["words"]) <= 5
    assert with_words > len(matches) // 2
    res = runner.invoke(app, ["query", str(out), "--paper", pid, "--k", "5", "--explain"], env={"COLUMNS": "4000"})
    assert res.exit_code == 0, res.output
    hit_id, facet, m = matches[0]
    assert "why, facet by facet" in res.stdout
    assert f"{facet} {m['cosine']:.2f}: “{m['query']}” ↔ “{m['hit']}”" in res.stdout


def test_query_paper_citation_channel_feedback_and_off(built) -> None:
    """`--paper` with the teacher walks the stored graph rows with the citation channel (W = 3 by
    default); `--citation-weight 0` is the stored rows alone (what the generative retriever learns);
    `--feedback 3` walks the rows with the feedback pass."""
    out, _ = built
    from graft.external import FEEDBACK, CorpusScorer
    from graft.index import Index
    from graft.teacher import TeacherConfig

    idx = Index.open(out)
    cited = idx.citations["cited"].value_counts().sort(["count", "cited"], descending=[True, False])["cited"].to_list()
    links = idx.citation_links

    def first_linked(pid: str) -> bool:
        """The paper's first 3 stored results are linked to some other paper (the channel's material)."""
        first = [idx.row(h.paper_id) for h in idx.query_paper(pid).hits[:3]]
        return bool(set(links[first].indices.tolist()) - {idx.row(pid)})

    # the 3 most cited papers, and the most cited one whose first results have links: on an 80-paper
    # slice most papers are link-less, so the first results decide whether the channel has anything to add
    papers = cited[:3] + [next(p for p in cited if first_linked(p))]
    changed, with_channel = 0, []
    for pid in dict.fromkeys(papers):
        res = runner.invoke(app, ["query", str(out), "--paper", pid, "--retriever", "teacher", "--json"])
        assert res.exit_code == 0, res.output
        hits = json.loads(res.stdout)["hits"]
        if any(h["citation"] is not None for h in hits):
            with_channel.append(pid)
        node = idx.row(pid)
        want = idx.query_rows(idx.teacher().node_rows(node), k=20, exclude={node},
                              config=TeacherConfig(citation_weight=3.0, citation_keep=3))
        assert [h["paper_id"] for h in hits] == [h.paper_id for h in want.hits]
        assert [h["paper_id"] for h in hits] == [h.paper_id for h in idx.query(paper=pid, retriever="teacher").hits]
        for h in hits:  # channel hits name the first results they are linked to; facets stay graph edges
            if h["citation"] is not None:
                assert h["citation"]["papers"] and h["citation"]["first"] == 3
        res = runner.invoke(app, ["query", str(out), "--paper", pid, "--retriever", "teacher",
                                  "--citation-weight", "0", "--json"])
        stored = [h["paper_id"] for h in json.loads(res.stdout)["hits"]]
        assert stored == [h.paper_id for h in idx.query_paper(pid).hits]
        # the channel never pushes the facet fusion's first 3 down (--citation-keep 3, the default)
        assert [h["paper_id"] for h in hits][:3] == stored[:3]
        scores = [h["score"] for h in hits]
        assert scores == sorted(scores, reverse=True)  # ranks and scores agree (TREC files sort by score)
        changed += [h["paper_id"] for h in hits] != stored
        res = runner.invoke(app, ["query", str(out), "--paper", pid, "--retriever", "teacher", "--feedback", "3",
                                  "--citation-weight", "0", "--json"])
        fed = [h["paper_id"] for h in json.loads(res.stdout)["hits"]]
        assert fed == [h.paper_id for h in CorpusScorer(idx, feedback=FEEDBACK, citation_weight=0)
                       .query_paper(pid).hits]
    assert changed and with_channel  # the channel changes at least one of the rankings
    shown = runner.invoke(app, ["query", str(out), "--paper", with_channel[0], "--retriever", "teacher"],
                          env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "cited with:" in shown.stdout and "feedback pass" not in shown.stdout
    fed = runner.invoke(app, ["query", str(out), "--paper", cited[0], "--retriever", "teacher", "--feedback", "3"],
                        env={"COLUMNS": "200"})
    assert fed.exit_code == 0 and "feedback pass: the citation links of the first 3 papers" in fed.stdout
    plain = runner.invoke(app, ["query", str(out), "--paper", with_channel[0], "--retriever", "teacher",
                                "--citation-weight", "0"], env={"COLUMNS": "200"})
    assert plain.exit_code == 0 and "cited with" not in plain.stdout
    # a batch of corpus papers: the same answers, one scorer for all
    qfile, run = out.parent / "fb_queries.txt", out.parent / "fb_run.txt"
    qfile.write_text("\n".join(cited[:3]) + "\n")
    res = runner.invoke(app, ["query", str(out), "--queries", str(qfile), "--retriever", "teacher", "--k", "5",
                              "--trec-out", str(run)])
    assert res.exit_code == 0, res.output
    lines = [line.split() for line in run.read_text().splitlines()]
    searcher = idx.searcher(retriever="teacher", k=5)  # the library's front door: the same answers
    for pid in cited[:3]:
        assert [x[2] for x in lines if x[0] == pid] == [h.paper_id for h in searcher.paper(pid).hits]
    for fusion in ("graph-rrf", "graph-walk"):  # no trained model here: the way out is not the graft retriever
        res = runner.invoke(app, ["query", str(out), "--paper", cited[0], "--retriever", "teacher",
                                  "--fusion", fusion], env={"COLUMNS": "300"})
        assert res.exit_code == 2 and "use --fusion rrf" in res.output and "graft train" in res.output, res.output
        assert "--retriever graft" not in res.output

    # papers outside the corpus in a batch are taken apart together (shared encoder batches) and
    # answered as each alone: corpus papers' texts under new ids, beside a corpus paper
    papers = idx.papers.filter(pl.col("paper_id").is_in(cited[3:6]))
    records = [{"id": f"new-{i}", "title": t, "abstract": a}
               for i, (t, a) in enumerate(zip(papers["title"].to_list(), papers["abstract"].to_list()))]
    qfile.write_text("\n".join([json.dumps(r) for r in records] + [cited[0]]) + "\n")
    res = runner.invoke(app, ["query", str(out), "--queries", str(qfile), "--retriever", "teacher", "--k", "8",
                              "--trec-out", str(run)])
    assert res.exit_code == 0, res.output
    lines = [line.split() for line in run.read_text().splitlines()]
    teacher8 = idx.searcher(retriever="teacher", k=8)
    assert [x[2] for x in lines if x[0] == cited[0]] == [h.paper_id for h in teacher8.paper(cited[0]).hits]
    for rec in records:
        one = out.parent / f"{rec['id']}.json"
        one.write_text(json.dumps(rec))
        alone = runner.invoke(app, ["query", str(out), "--record", str(one), "--retriever", "teacher", "--k", "8",
                                    "--json"])
        assert alone.exit_code == 0, alone.output
        hits = json.loads(alone.stdout)["hits"]
        batched = [x for x in lines if x[0] == rec["id"]]
        assert [x[2] for x in batched] == [h["paper_id"] for h in hits]
        assert [float(x[4]) for x in batched] == pytest.approx([h["score"] for h in hits], abs=1e-4)


def test_query_refuses_bad_input_with_a_clear_error(built) -> None:
    """Nonsense values and unreadable files end with an error line (exit 2), not a traceback or a
    quietly wrong answer; records without an id get a qid of their own in the run file."""
    from graft.index import Index

    out, _ = built
    idx = Index.open(out)
    pid = idx.paper_ids[0]
    base = ["query", str(out), "--retriever", "teacher"]
    for args, message in (
        (["--paper", pid, "--k", "-3"], "Invalid value for '--k'"),
        (["--paper", pid, "--k", "0"], "Invalid value for '--k'"),
        (["--paper", pid, "--beams", "0"], "Invalid value for '--beams'"),
        (["--queries", str(out.parent / "no-such-file.txt")], "cannot read it"),
        (["--paper", pid, "--trec-out", str(out / "manifest.json" / "run.txt")], "manifest.json is a file"),
        (["--paper", pid, "--trec-out", str(out)], f"{out} is a folder"),
        (["--queries", str(out / "no-such-dir" / "q.txt"), "--trec-out", str(out / "manifest.json" / "r.txt")],
         "manifest.json is a file"),  # refused before the queries are read
        (["--paper", pid, "--retriever", "graft", "--device", "tpu"], "device 'tpu' is unknown"),
        (["--paper", pid, "--device", "tpu"], "device 'tpu' is unknown"),  # the teacher's too
        (["--text", "A title. An abstract.", "--fusion", "bogus"], "unknown fusion 'bogus'"),
        (["--queries", str(out / "papers.parquet")], "cannot read it"),
    ):
        res = runner.invoke(app, base + args)
        assert res.exit_code == 2 and message in res.output, (args, res.output)
        assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    bad = out.parent / "bad_queries.jsonl"
    bad.write_text("# only a comment\n\n")
    res = runner.invoke(app, base + ["--queries", str(bad)])
    assert res.exit_code == 2 and "no queries in it" in res.output, res.output
    bad.write_text(f"{pid}\n# a comment\n{json.dumps({'foo': 1})}\n")
    res = runner.invoke(app, base + ["--queries", str(bad)])
    assert res.exit_code == 2 and "line 3: give the 'id' of a corpus paper" in res.output
    # each line is checked with its line number: ids are one word, each query's own, and in the index
    for lines, message in (
        ([pid, "# again", pid], "line 3: query id '" + pid + "' is also on line 1"),
        (["", "no-such-paper"], "line 2: paper 'no-such-paper' is not in the index"),
        ([json.dumps({"id": "my draft", "title": "t"})], "line 1: 'id' 'my draft' must be one word"),
        ([json.dumps({"id": "", "title": "t"})], "line 1: 'id' '' must be one word"),
        ([json.dumps({"title": "t", "references": pid})], "line 1: 'references' must be a list of paper ids"),
        ([json.dumps({"title": "t", "references": [[pid]]})], "line 1: 'references' must be a list of paper ids"),
        ([json.dumps({"title": ["t", "u"]})], "line 1: 'title' must be a string"),
    ):
        bad.write_text("\n".join(lines) + "\n")
        res = runner.invoke(app, base + ["--queries", str(bad)])
        assert res.exit_code == 2 and message in res.output, (lines, res.output)
    bad.write_text(json.dumps({"title": "t", "references": pid}))
    res = runner.invoke(app, base + ["--record", str(bad)])
    assert res.exit_code == 2 and "'references' must be a list of paper ids" in res.output, res.output
    # --record takes what a --queries line takes: {"id": ...} alone is a corpus paper, as --paper
    bad.write_text(json.dumps({"id": pid}))
    by_record = runner.invoke(app, base + ["--record", str(bad), "--k", "5", "--json"])
    by_paper = runner.invoke(app, base + ["--paper", pid, "--k", "5", "--json"])
    assert by_record.exit_code == 0 == by_paper.exit_code, by_record.output
    assert json.loads(by_record.stdout) == json.loads(by_paper.stdout) and len(json.loads(by_paper.stdout)["hits"]) == 5
    res = runner.invoke(app, base + ["--record", str(bad), "--references", idx.paper_ids[1]])
    assert res.exit_code == 2 and "--references goes with --text or --record (a paper outside" in res.output
    bad.write_text(json.dumps({"id": "no-such-paper"}))
    res = runner.invoke(app, base + ["--record", str(bad)])
    assert res.exit_code == 2 and "no-such-paper" in res.output and "given by its title and abstract" in res.output
    bad.write_text(json.dumps({"references": [pid]}))
    res = runner.invoke(app, base + ["--record", str(bad)])
    assert res.exit_code == 2 and "give the 'id' of a corpus paper, or a paper's 'title'" in res.output
    # two papers outside the corpus without ids: one qid each (query-LINE), not both "query"
    papers = idx.papers.head(2)
    good = out.parent / "noid_queries.jsonl"
    good.write_text("\n".join(json.dumps({"title": t, "abstract": a})
                              for t, a in zip(papers["title"].to_list(), papers["abstract"].to_list())) + "\n")
    run = out.parent / "noid_run.txt"
    res = runner.invoke(app, base + ["--queries", str(good), "--k", "3"])  # would show nothing: refused first
    assert res.exit_code == 2 and "2 queries would run and show nothing" in res.output, res.output
    res = runner.invoke(app, base + ["--queries", str(good), "--k", "3", "--trec-out", str(run)])
    assert res.exit_code == 0, res.output
    qids = [line.split()[0] for line in run.read_text().splitlines()]
    assert qids == ["query-1"] * 3 + ["query-2"] * 3
    # the library refuses the same record, and bad settings in one place: QueryConfig
    from graft.errors import QueryError
    from graft.query import QueryConfig, Searcher

    with pytest.raises(QueryError, match="query 1: give the 'id' of a corpus paper"):
        Searcher(idx, QueryConfig(retriever="teacher")).check([{"foo": 1}])
    for bad, message in (({"k": 0}, "k must be a whole number >= 1, got 0"),
                         ({"k": 2.5}, "k must be a whole number >= 1, got 2.5"),
                         ({"feedback": True}, "feedback must be a whole number >= 0 (or None), got True"),
                         ({"citation_weight": float("nan")}, "citation_weight must be a finite number >= 0, got nan")):
        with pytest.raises(QueryError, match=re.escape(message)):
            QueryConfig(retriever="teacher", **bad)
        with pytest.raises(QueryError, match=re.escape(message)):  # the Python API: the same check
            idx.query(paper=pid, retriever="teacher", **bad)
    with pytest.raises(QueryError, match=f"query 2: id '{pid}' is also query 1's"):
        idx.searcher(retriever="teacher").batch([{"id": pid}, {"id": pid}])


def test_teacher_query_loads_no_model_libraries(built) -> None:
    """`graft query --paper` with the teacher reads the index only: neither torch nor transformers
    is imported (they cost seconds of start-up), with or without the feedback pass."""
    import os
    import subprocess
    import sys

    out, _ = built
    from graft.index import Index

    pid = Index.open(out).paper_ids[0]
    script = ("import sys\nfrom cli.app import app\n"
              f"sys.argv = ['graft', 'query', {str(out)!r}, '--paper', {pid!r}, '--json', '--feedback', sys.argv[1]]\n"
              "try:\n    app()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
              "print('LOADED', sorted(m for m in ('torch', 'transformers', 'sentence_transformers') "
              "if m in sys.modules))\n")
    for fb in ("0", "3"):
        done = subprocess.run([sys.executable, "-c", script, fb], cwd=REPO, capture_output=True, text=True,
                              timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout[: done.stdout.rindex("LOADED")])  # the hits
        assert done.stdout.strip().endswith("LOADED []"), done.stdout[-200:]


def test_text_query_runs_the_stored_encoder_without_model_libraries(built, encoder) -> None:
    """`graft build` on the CPU stores its encoder's ONNX export in the user cache; `graft query
    --text` then embeds the paper with it and imports neither torch nor transformers, with the hits
    (and scores to rounding) of the encoder on PyTorch."""
    import os
    import subprocess
    import sys

    from graft.encoder_store import default_store, load
    from graft.external import ExternalScorer
    from graft.index import Index
    from graft.records import record_from_text

    out, _ = built
    assert load(default_store(), encoder.path) is not None
    text = ("Graph neural networks for molecule property prediction. We propose a message passing "
            "network that outperforms baselines on several benchmarks.")
    script = ("import sys\nfrom cli.app import app\n"
              f"sys.argv = ['graft', 'query', {str(out)!r}, '--text', {text!r}, '--json', '--retriever', 'teacher']\n"
              "try:\n    app()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
              "print('LOADED', sorted(m for m in ('torch', 'transformers', 'sentence_transformers') "
              "if m in sys.modules))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("LOADED []"), done.stdout[-200:]
    hits = json.loads(done.stdout[: done.stdout.rindex("LOADED")])["hits"]
    idx = Index.open(out)
    scorer, rec = ExternalScorer(idx, teacher=QueryConfig().teacher_config(), encoder=encoder), record_from_text(text)
    want = scorer.query_rows(scorer.rows(rec)[0], k=20, exclude=set(scorer.reference_rows(rec).tolist()))
    assert [h["paper_id"] for h in hits] == [h.paper_id for h in want.hits]
    assert [h["score"] for h in hits] == pytest.approx([h.score for h in want.hits], abs=1e-4)


def test_searcher_is_graft_querys_library_form(built, encoder) -> None:
    """`graft.query.Searcher`, what `graft query` runs: a paper outside the corpus with references
    gets the CLI's answer and never its references back; a mixed batch answers each query as alone;
    bad queries and settings are refused before any work."""
    from graft.index import Index
    from graft.query import QueryConfig, Searcher
    from graft.records import is_outside

    out, _ = built
    idx = Index.open(out)
    cited = idx.citations["cited"].value_counts().sort(["count", "cited"], descending=[True, False])["cited"].to_list()
    row = idx.papers.row(idx.row(cited[1]), named=True)
    record = {"id": "draft", "title": row["title"], "abstract": row["abstract"], "references": cited[2:4]}
    related = Searcher(idx, QueryConfig(retriever="teacher", k=10), encoder=encoder)  # the session's encoder
    alone = related.record(record)
    assert alone.info["model"] == "none (graph walk)" and alone.retriever == "teacher"
    assert alone.query_id == "draft" and len(alone.hits) == 10
    assert not {h.paper_id for h in alone.hits} & set(cited[2:4])
    path = out.parent / "draft.json"
    path.write_text(json.dumps(record))
    res = runner.invoke(app, ["query", str(out), "--record", str(path), "--retriever", "teacher", "--k", "10", "--json"])
    assert res.exit_code == 0, res.output
    payload = json.loads(res.stdout)
    assert (payload["retriever"], payload["fusion"], payload["model"]) == ("teacher", "rrf", "none (graph walk)")
    assert [h["paper_id"] for h in payload["hits"]] == [h.paper_id for h in alone.hits]
    # the paper's facets as read from its text travel with the result, and the table shows them
    read = related.scorer.rows(record)[1]
    assert alone.info["query_facets"] == read and all(read[f] for f in read)
    res = runner.invoke(app, ["query", str(out), "--record", str(path), "--retriever", "teacher", "--k", "3"],
                        env={"COLUMNS": "300"})
    # (compared with whitespace collapsed: the console wraps a line of several long sentences)
    assert res.exit_code == 0 and " ".join(f"its method: {' | '.join(read['method'])}".split()) in " ".join(
        res.stdout.split())
    assert "not in the index" not in res.output
    # a reference outside the corpus counts for nothing: said on stderr (--references refuses one)
    path.write_text(json.dumps({**record, "references": [*cited[2:4], "no-such-paper"]}))
    res = runner.invoke(app, ["query", str(out), "--record", str(path), "--retriever", "teacher", "--k", "3"],
                        env={"COLUMNS": "300"})
    assert res.exit_code == 0 and "note: 1 reference(s) of 1 query paper(s) are not in the index and count for " \
        "nothing (e.g. query 1: 'no-such-paper')" in res.stderr
    res = runner.invoke(app, ["query", str(out), "--record", str(path), "--retriever", "teacher", "--k", "3", "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["hits"] and "no-such-paper" in res.stderr  # --json: still said

    other = {"title": row["title"], "abstract": row["abstract"]}
    batch = [record, {"id": cited[0]}, other]
    assert [is_outside(r) for r in batch] == [True, False, True]
    many = related.batch(batch)
    assert [r.query_id for r in many] == ["draft", cited[0], "query-3"]  # one qid each, by position
    for got, rec in zip(many, batch):
        assert [h.paper_id for h in got.hits] == [h.paper_id for h in related.record(rec).hits]
    fresh = Searcher(idx, QueryConfig(retriever="teacher"))
    with pytest.raises(GraftError, match="'no-such-paper' is not in index"):
        fresh.batch([record, other, {"id": "no-such-paper"}])
    assert not fresh._made  # refused before any scorer was loaded or any record taken apart
    with pytest.raises(GraftError, match="plain rrf"):
        QueryConfig(retriever="teacher", fusion="graph-rrf")
    with pytest.raises(GraftError, match="text_neighbours must be a whole number >= 0"):
        QueryConfig(text_neighbours=-1)
    with pytest.raises(GraftError, match="unknown retriever 'bm25'"):
        QueryConfig(retriever="bm25")


@pytest.mark.slow
def test_build_says_where_it_stored_the_encoder_export(tmp_path, monkeypatch) -> None:
    """The first CPU build with an empty user cache stores the encoder's export there and says so
    (table and --json); a second build finds it stored and writes nothing."""
    monkeypatch.setenv("GRAFT_CACHE", str(tmp_path / "cache"))
    res = runner.invoke(app, ["build", "aclsum", "--limit", "5", "--out", str(tmp_path / "a")], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    stored = tmp_path / "cache" / "encoders"
    onnx = next(stored.glob("*.onnx"))
    assert f"stored the encoder's ONNX export for queries, which then start without torch: {onnx}" in res.stdout
    res = runner.invoke(app, ["build", "aclsum", "--limit", "5", "--out", str(tmp_path / "b"), "--json"])
    assert res.exit_code == 0 and json.loads(res.stdout)["encoder_export"] is None
    assert list(stored.glob("*.onnx")) == [onnx]


def test_query_text_and_record(built, tmp_path) -> None:
    out, _ = built
    text = ("Graph neural networks for molecule property prediction. We propose a message passing "
            "network that outperforms baselines on several benchmarks.")
    res = runner.invoke(app, ["query", str(out), "--text", text, "--k", "3", "--json"])
    assert res.exit_code == 0, res.output
    assert len(json.loads(res.stdout)["hits"]) == 3
    rec = tmp_path / "q.json"
    rec.write_text(json.dumps({"title": "Robust mixtures", "abstract": "We study outlier detection."}))
    res = runner.invoke(app, ["query", str(out), "--record", str(rec), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["hits"]
    # a corpus paper posed by its text (its id, title and abstract; a file with a byte-order mark)
    # is not its own first result, though its text matches its own items best
    from graft.index import Index

    papers = Index.open(out).papers
    own = {"id": papers["paper_id"][0], "title": papers["title"][0], "abstract": papers["abstract"][0]}
    rec.write_bytes(b"\xef\xbb\xbf" + json.dumps(own).encode())
    res = runner.invoke(app, ["query", str(out), "--record", str(rec), "--json", "--k", "5"])
    assert res.exit_code == 0, res.output
    ids = [h["paper_id"] for h in json.loads(res.stdout)["hits"]]
    assert len(ids) == 5 and own["id"] not in ids
    without_id = {k: v for k, v in own.items() if k != "id"}
    rec.write_text(json.dumps(without_id))
    res = runner.invoke(app, ["query", str(out), "--record", str(rec), "--json", "--k", "5"])
    assert res.exit_code == 0 and json.loads(res.stdout)["hits"][0]["paper_id"] == own["id"], res.output


def test_query_text_neighbours_sets_the_text_coupling(built, encoder) -> None:
    from graft.external import ExternalScorer
    from graft.index import Index
    from graft.records import record_from_text

    out, _ = built
    idx = Index.open(out)
    text = ("Graph neural networks for molecule property prediction. We propose a message passing "
            "network that outperforms baselines on several benchmarks.")
    got = {}
    for m in (10, 0):
        args = ["query", str(out), "--text", text, "--k", "10", "--json", "--retriever", "teacher"]
        res = runner.invoke(app, args + ([] if m == 10 else ["--text-neighbours", "0"]))
        assert res.exit_code == 0, res.output
        got[m] = [(h["paper_id"], round(h["score"], 6)) for h in json.loads(res.stdout)["hits"]]
        scorer = ExternalScorer(idx, teacher=QueryConfig().teacher_config(), encoder=encoder, text_neighbours=m)
        rows, _ = scorer.rows(record_from_text(text))
        want = scorer.query_rows(rows, query_id="query", k=10)  # with the citation channel
        assert got[m] == [(h.paper_id, round(h.score, 6)) for h in want.hits]
    assert got[10] != got[0]
    res = runner.invoke(app, ["query", str(out), "--text", text, "--retriever", "teacher", "--text-neighbours", "-1"])
    assert res.exit_code == 2 and "Invalid value for '--text-neighbours'" in res.output
    # one pass only (--feedback 0): the scorer's rows without the feedback pass
    res = runner.invoke(app, ["query", str(out), "--text", text, "--k", "10", "--json", "--retriever", "teacher",
                              "--feedback", "0"])
    assert res.exit_code == 0, res.output
    one_pass = [(h["paper_id"], round(h["score"], 6)) for h in json.loads(res.stdout)["hits"]]
    scorer = ExternalScorer(idx, teacher=QueryConfig().teacher_config(), encoder=encoder, feedback=0)
    rows, _ = scorer.rows(record_from_text(text))
    assert one_pass == [(h.paper_id, round(h.score, 6)) for h in scorer.query_rows(rows, query_id="query", k=10).hits]
    assert one_pass != got[10]
    res = runner.invoke(app, ["query", str(out), "--text", text, "--retriever", "teacher", "--feedback", "-1"])
    assert res.exit_code == 2 and "Invalid value for '--feedback'" in res.output


def test_query_references_shape_the_result_and_are_not_returned(built, encoder) -> None:
    from graft.external import ExternalScorer
    from graft.index import Index
    from graft.records import record_from_text

    out, _ = built
    idx = Index.open(out)
    cited = idx.citations["cited"].value_counts().sort(["count", "cited"], descending=[True, False])["cited"].to_list()[
        :2]  # the most cited papers (ties by id)
    text = ("Graph neural networks for molecule property prediction. We propose a message passing "
            "network that outperforms baselines on several benchmarks.")
    args = ["query", str(out), "--text", text, "--k", "10", "--json", "--retriever", "teacher"]
    res = runner.invoke(app, args + ["--references", ",".join(cited)])
    assert res.exit_code == 0, res.output
    got = [(h["paper_id"], round(h["score"], 6)) for h in json.loads(res.stdout)["hits"]]
    record = {**record_from_text(text), "references": cited}
    scorer = ExternalScorer(idx, teacher=QueryConfig().teacher_config(), encoder=encoder)
    rows, _ = scorer.rows(record)
    want = scorer.query_rows(rows, k=10, exclude={idx.row_of[p] for p in cited})
    assert got == [(h.paper_id, round(h.score, 6)) for h in want.hits]
    assert not {p for p, _ in got} & set(cited)
    plain = runner.invoke(app, args)
    assert [h["paper_id"] for h in json.loads(plain.stdout)["hits"]] != [p for p, _ in got]
    for extra, message in ((["--references", "nope"], "not in the index"),
                           (["--references", cited[0], "--retriever", "graft"], "no trained model")):
        res = runner.invoke(app, ["query", str(out), "--text", text, *extra])
        assert res.exit_code == 2 and message in res.output, res.output
    res = runner.invoke(app, ["query", str(out), "--paper", cited[0], "--references", cited[1]])
    assert res.exit_code == 2 and "goes with --text or --record" in res.output


def test_query_errors(built, tmp_path) -> None:
    out, _ = built
    res = runner.invoke(app, ["query", str(out), "--paper", "no-such-paper"])
    assert res.exit_code == 2 and "not in index" in res.output
    res = runner.invoke(app, ["query", str(out)])
    assert res.exit_code == 2 and "exactly one of" in res.output
    res = runner.invoke(app, ["query", str(tmp_path / "missing"), "--paper", "x"])
    assert res.exit_code == 2 and "graft build" in res.output
    res = runner.invoke(app, ["query", str(out), "--text", " . -- "])
    assert res.exit_code == 2 and "query text '. --' has no words" in res.output


@pytest.mark.parametrize("fmt", ["graphml", "gexf", "json"])
def test_export_formats_parse(built, tmp_path, fmt) -> None:
    out, summary = built
    target = tmp_path / f"g.{fmt}"
    res = runner.invoke(app, ["export", str(out), "--format", fmt, "--out", str(target)])
    assert res.exit_code == 0, res.output
    if fmt == "graphml":
        g = nx.read_graphml(target)
        ids = re.findall(r'<edge [^>]*\bid="([^"]+)"', target.read_text())
        assert len(ids) == len(set(ids)) == g.number_of_edges()  # unique in the document, as GraphML asks
    elif fmt == "gexf":
        g = nx.read_gexf(target)
    else:
        g = nx.node_link_graph(json.loads(target.read_text()), edges="edges")
    assert g.number_of_nodes() == 80
    cites = [(u, v) for u, v, d in g.edges(data=True) if d["relation"] == "citation"]
    assert g.number_of_edges() == sum(summary["counts"]["edges"].values()) + len(cites)
    facets = {d["facet"] for _, _, d in g.edges(data=True) if d["relation"] == "facet"}
    assert facets == {"problem", "method", "result", "contribution"}
    # the citation links inside the corpus travel too, citing -> cited
    from graft.index import Index

    c = Index.open(out).citations
    assert sorted(cites) == sorted(zip(c["citing"].to_list(), c["cited"].to_list())) and cites
    res = runner.invoke(app, ["export", str(out), "--format", "dot"])
    assert res.exit_code == 2 and "graphml, gexf, json" in res.output
    # the Python API names what it cannot do, the same way
    from graft.export import export_graph, to_networkx
    from graft.index import Index

    idx = Index.open(out)
    assert {d["facet"] for _, _, d in to_networkx(idx, facets=("method",), citations=False).edges(data=True)} == {
        "method"}
    for call, message in ((lambda: to_networkx(idx, facets="method"), "not one string: facets=('method',)"),
                          (lambda: to_networkx(idx, facets=("bogus",)), "unknown facet(s) 'bogus'"),
                          (lambda: export_graph(idx, tmp_path, "json"), f"cannot export to {tmp_path}: "),
                          (lambda: export_graph(idx, target, "dot"), "export format 'dot' is unknown")):
        with pytest.raises(GraftError, match=re.escape(message)):
            call()


def test_export_writes_readable_xml_from_any_title_and_says_why_it_cannot_write(built, tmp_path) -> None:
    """A title from PDF extraction may hold a form feed, which XML does not allow: GraphML and GEXF
    get a space there (JSON keeps it); an output path that cannot be written is an error line."""
    import shutil

    out, _ = built
    copy = tmp_path / "idx"
    shutil.copytree(out, copy)
    papers = pl.read_parquet(copy / "papers.parquet")
    first = papers["paper_id"][0]
    titles = papers["title"].to_list()
    titles[0] = "Parsing\x0cwith form feeds & <angles> \x00 \"quotes\" café"
    papers.with_columns(pl.Series("title", titles)).write_parquet(copy / "papers.parquet")
    for fmt, read in (("graphml", nx.read_graphml), ("gexf", nx.read_gexf),
                      ("json", lambda p: nx.node_link_graph(json.loads(p.read_text()), edges="edges"))):
        target = tmp_path / f"g.{fmt}"
        res = runner.invoke(app, ["export", str(copy), "--format", fmt, "--out", str(target)])
        assert res.exit_code == 0, res.output
        want = titles[0] if fmt == "json" else 'Parsing with form feeds & <angles>   "quotes" café'
        assert read(target).nodes[first]["title"] == want
    for target, message in ((tmp_path, f"{tmp_path} is a folder"),
                            (tmp_path / "g.json" / "sub.gexf", "g.json is a file")):
        res = runner.invoke(app, ["export", str(copy), "--format", "gexf", "--out", str(target)],
                            env={"COLUMNS": "300"})
        assert res.exit_code == 2 and f"cannot export to {target}: " in res.output and message in res.output, res.output
        assert res.exception is None or isinstance(res.exception, SystemExit), res.exception


@pytest.mark.slow
def test_bad_corpus_stops_unless_skip_bad(tmp_path) -> None:
    lines = [
        {"id": "a", "title": "Paper A", "abstract": "We propose a method for parsing."},
        {"id": "b", "title": "Paper B"},
        {"id": "c", "title": "Paper C", "abstract": "Results show gains.", "references": ["a", "zz"]},
        {"id": "d", "title": "Paper D", "abstract": "A new dataset for parsing."},
    ]
    corpus = tmp_path / "bad.jsonl"
    corpus.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    res = runner.invoke(app, ["build", str(corpus), "--out", str(tmp_path / "i"), "-q"])
    assert res.exit_code == 2
    assert "line 2" in res.output and "abstract" in res.output and "--skip-bad" in res.output
    res = runner.invoke(app, ["build", str(corpus), "--out", str(tmp_path / "i"), "--skip-bad", "--json"])
    assert res.exit_code == 0, res.output
    counts = json.loads(res.stdout)["counts"]
    assert counts["papers"] == 3 and counts["skipped_records"] == 1 and counts["dropped_references"] == 1
    assert "skipped" in res.stderr and "line 2" in res.stderr
    res = runner.invoke(app, ["build", str(corpus), "--out", str(tmp_path / "i"), "--skip-bad", "--top-k", "1"],
                        env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "reused (facets, titles, context, papers)" in res.stdout and "--fresh" in res.stdout
    from graft.index import Index

    res = runner.invoke(app, ["build", str(corpus), "--out", str(tmp_path / "i"), "--skip-bad", "--alpha", "1", "-q"])
    assert res.exit_code == 0, res.output
    idx = Index.open(tmp_path / "i")
    assert (idx.manifest["stages"]["build"]["config"]["alpha"], idx.manifest["stages"]["build"]["config"]["beta"]) == (
        1.0, 0.0)
    sim = idx.graphs["method"].toarray()  # facet similarity alone
    res = runner.invoke(app, ["build", str(corpus), "--out", str(tmp_path / "i"), "--skip-bad", "--alpha", "0.5", "-q"])
    assert res.exit_code == 0, res.output
    half = Index.open(tmp_path / "i")
    # every pair of the three papers is an edge: half similarity, half citation score (text coupling
    # for a paper without citation links)
    cite = half.citation_score.toarray() + half.text_coupling.toarray()
    np.testing.assert_allclose(half.graphs["method"].toarray(), 0.5 * sim + 0.5 * cite, atol=1e-3)
    res = runner.invoke(app, ["build", str(corpus), "--out", str(tmp_path / "i"), "--skip-bad", "--alpha", "1.5"])
    assert res.exit_code == 2 and "Invalid value for '--alpha'" in res.output
    res = runner.invoke(app, ["build", str(corpus), "--out", str(tmp_path / "k"), "--skip-bad", "--cache-from",
                              str(tmp_path / "i")], env={"COLUMNS": "500"})
    assert res.exit_code == 0, res.output
    stored = Index.open(tmp_path / "i").facets
    items = len(set(zip(stored["paper_id"], stored["text"])))  # an item repeated in its paper is stored once
    assert (f"copied from {tmp_path / 'i'} (facets of 3 papers, 3 title vectors, {items} items read in context, "
            "3 title + abstract vectors)" in res.stdout)
    res = runner.invoke(app, ["build", str(corpus), "--out", str(tmp_path / "k"), "--skip-bad", "--fresh",
                              "--cache-from", str(tmp_path / "i")])
    assert res.exit_code == 2 and "--cache-from and --fresh contradict" in res.output
    res = runner.invoke(app, ["build", str(corpus), "--out", str(tmp_path / "i"), "--skip-bad", "--fresh", "--json",
                              "--batch-size", "8"])
    assert res.exit_code == 0 and json.loads(res.stdout)["reused_checkpoints"] == []
    from graft.manifest import read_manifest

    assert read_manifest(tmp_path / "i")["stages"]["build"]["config"]["embedding_batch_size"] == 8
    res = runner.invoke(app, ["build", str(corpus), "--out", str(tmp_path / "m"), "--skip-bad", "--json",
                              "--cache-from", str(tmp_path / "i")])  # its stores are batch size 8's now
    assert res.exit_code == 0 and json.loads(res.stdout)["cache_from"]["copied"] == {
        "facets": 0, "titles": 0, "context": 0, "papers": 0}
    # auto, with a store to keep the export in for queries: it is due with the first call, however small,
    # so ONNX Runtime made the vectors, the manifest says so, and the store holds the export
    from graft.encoder import default_model_path
    from graft.encoder_store import default_store, stored_export

    assert read_manifest(tmp_path / "i")["embedding"]["backend"] == "onnx"
    assert stored_export(default_store(), default_model_path()) is not None
    res = runner.invoke(app, ["build", str(corpus), "--out", str(tmp_path / "i"), "--skip-bad", "--fresh", "--json",
                              "--encoder-backend", "torch"])
    assert res.exit_code == 0 and read_manifest(tmp_path / "i")["embedding"]["backend"] == "torch"
    res = runner.invoke(app, ["build", str(corpus), "--out", str(tmp_path / "i"), "--skip-bad", "--json", "--fresh",
                              "--encoder-backend", "onnx"])
    assert res.exit_code == 0, res.output
    assert read_manifest(tmp_path / "i")["embedding"]["backend"] == "onnx"
    res = runner.invoke(app, ["build", str(corpus), "--out", str(tmp_path / "j"), "--encoder-backend", "tensorrt"])
    assert res.exit_code == 2 and "(--encoder-backend) 'tensorrt' is unknown; allowed: auto, torch, onnx" in res.output
    res = runner.invoke(app, ["build", str(corpus), "--out", str(tmp_path / "j"), "--batch-size", "0"])
    assert res.exit_code == 2 and "Invalid value for '--batch-size'" in res.output
    import torch

    for device, message in [("tpu", "unknown; allowed: cpu, cuda"), ("cuda", "no CUDA GPU")]:
        if device == "cuda" and torch.cuda.is_available():
            continue
        res = runner.invoke(app, ["build", str(corpus), "--out", str(tmp_path / "i"), "--skip-bad", "-q",
                                  "--device", device])
        assert res.exit_code == 2 and message in res.output, res.output


@pytest.mark.slow
def test_demo_runs_on_aclsum(tmp_path) -> None:
    res = runner.invoke(app, ["demo", "--out", str(tmp_path / "demo"), "--limit", "20", "-q"],
                        env={"COLUMNS": "200"})
    assert res.exit_code == 0, res.output
    assert "related to" in res.stdout and "graft query" in res.stdout and "graft serve" in res.stdout
    # the papers shown are the ones the suggested `graft query --paper` returns
    paper = res.stdout.split("--paper ", 1)[1].split()[0]
    again = runner.invoke(app, ["query", str(tmp_path / "demo"), "--paper", paper, "--k", "10", "--json"])
    assert again.exit_code == 0, again.output
    hits = [h["paper_id"] for h in json.loads(again.stdout)["hits"]]
    assert hits and all(h in res.stdout for h in hits)
    # an unknown --paper is refused before the build, not after it
    res = runner.invoke(app, ["demo", "--out", str(tmp_path / "demo2"), "--limit", "20", "--paper",
                              paper[:-1] + "x", "-q"], env={"COLUMNS": "300"})
    assert res.exit_code == 2 and "is not among the 20 ACLSum papers of the demo; similar ids:" in res.output
    assert not (tmp_path / "demo2").exists()
    res = runner.invoke(app, ["demo", "--out", str(tmp_path / "demo"), "--limit", "20", "--paper", paper, "-q"],
                        env={"COLUMNS": "200"})
    assert res.exit_code == 0 and f"related to {paper}" in res.stdout


def test_readme_commands_are_the_ci_commands() -> None:
    readme = (REPO / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    assert "make test" in (REPO / ".ci" / "run").read_text()


def _unknown_flags(line: str) -> tuple[list[str], list[str]]:
    """The subcommand path of a `graft ...` line and the --flags on it that command does not take."""
    import re

    import typer

    cmd, path = typer.main.get_command(app), []
    for word in line.split()[1:]:
        sub = getattr(cmd, "commands", {}).get(word)
        if sub is None:
            break
        cmd, path = sub, [*path, word]
    taken = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}
    return path, sorted(set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", line)) - taken)


def test_readme_graft_commands_name_real_subcommands_and_flags() -> None:
    """Every `graft ...` line of the bash blocks of the README and docs/*.md, and every inline
    `graft ...` command there, names a subcommand that exists and only flags it takes (the usage
    they show cannot drift from the CLI)."""
    import re

    lines = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = doc.read_text()
        lines += [line.strip() for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S)
                  for line in re.sub(r"\\\n\s*", " ", block).splitlines() if line.strip().startswith("graft ")]
        lines += [m.strip() for m in re.findall(r"`(graft [^`]+)`", text)]
    assert len(lines) > 60
    wrong = [(line, *_unknown_flags(line)) for line in lines]
    assert [w for w in wrong if not w[1] or w[2]] == []
    assert _unknown_flags("graft query INDEX --paper ID --nope") == (["query"], ["--nope"])
    assert _unknown_flags("graft eval run SPLIT --device cuda --top-k 3") == (["eval", "run"], ["--top-k"])


def _commands(cmd, path=()):
    """(subcommand path, click command) for every leaf command of the app."""
    subs = getattr(cmd, "commands", None)
    if subs is None:
        yield list(path), cmd
        return
    for name, sub in sorted(subs.items()):
        yield from _commands(sub, (*path, name))


#: Numeric options that must carry a declared range (shown in --help, checked before a command runs).
RANGED = {"--k", "--beams", "--limit", "--batch-size", "--top-k", "--alpha", "--title-weight", "--llm-concurrency",
          "--text-neighbours", "--feedback", "--citation-weight", "--ooc", "--survey", "--survey-dev", "--dev-share",
          "--min-neighbours", "--sections", "--papers-per-section", "--verify-rounds", "--graph-seeds", "--concurrency",
          "--max-edges", "--max-steps", "--per-device-batch-size", "--save-every-steps", "--recency-weight",
          "--retrieval-weight", "--link-weight", "--tie-links", "--epochs", "--lr", "--progress-every"}


def _declared_range(param) -> tuple:
    """(min, max) of an option's declared range: on the parameter in Typer's own core, on its click
    IntRange / FloatRange type where Typer builds on click, or on its `cli.options.finite` parser."""
    kind = getattr(param, "type", None)
    low, high = getattr(kind, "min", None), getattr(kind, "max", None)
    if low is None and high is None:
        low, high = getattr(param, "min", None), getattr(param, "max", None)
    if low is None and high is None:
        parser = getattr(getattr(getattr(param, "type_descriptor", None), "parameter_info", None), "parser", None)
        low, high = getattr(parser, "min", None), getattr(parser, "max", None)
    return low, high


def test_numeric_options_refuse_values_outside_their_range_before_any_work(tmp_path) -> None:
    """Every option with a declared range (`typer.Option(min=..., max=...)`, shown as e.g. [x>=1] in
    --help) refuses a value just below its minimum and just above its maximum with exit 2, naming
    the flag, before the command touches a file; the options in RANGED all have one."""
    import typer

    seen = set()
    for path, cmd in _commands(typer.main.get_command(app)):
        dummies = [w for p in cmd.params if p.required
                   for w in ([] if p.param_type_name == "argument" else [p.opts[0]]) + [str(tmp_path / "absent")]]
        for param in cmd.params:
            low, high = _declared_range(param)
            if param.param_type_name != "option" or (low is None and high is None):
                continue
            flag = param.opts[0]
            seen.add(flag)
            annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
            whole = (float not in (annotation, *typing.get_args(annotation)) if annotation is not None
                     else isinstance(low if low is not None else high, int))
            step = 1 if whole else 0.5
            values = ([low - step] if low is not None else []) + ([high + step] if high is not None else [])
            values += [] if whole else ["nan", "inf"]  # pass every range test the wrong way unless refused
            for value in values:
                res = runner.invoke(app, [*path, *dummies, flag, str(value)])
                assert res.exit_code == 2 and f"Invalid value for '{flag}'" in res.output, (path, flag, res.output)
            for within in {v for v in (low, high) if v is not None}:  # parsed only, never run
                with cmd.make_context(cmd.name, [*dummies, flag, str(within)]) as ctx:
                    assert ctx.params[param.name] == within
    assert RANGED <= seen, sorted(RANGED - seen)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_build_with_llm_extractor_caches_and_falls_back(tmp_path) -> None:
    import polars as pl
    from test_llm_client import FakeLLMServer, Reply, title_of

    corpus = write_slice(cs768_path(), 12, tmp_path)
    server = FakeLLMServer()
    down = {"Bolasso"}  # requests about these titles fail (the server refuses them)

    def behave(hit, body):
        title = title_of(body)  # the paper's title, read from the prompt's <data> block
        if "Robust mixtures" in title:  # one paper's answer breaks the schema: discarded, heuristic used
            return Reply(content='{"problem": ["x"]}')
        if any(word in title for word in down):
            return Reply(status=400)
        return Reply(content=json.dumps({f: [f"{f} of {title[:60]}"] for f in
                                         ("problem", "method", "result", "contribution")}))

    server.behave = behave
    out = tmp_path / "idx"
    args = ["build", str(corpus), "--out", str(out), "--extractor", "llm", "--llm-base-url", server.url,
            "--llm-model", "m", "--llm-api-key-env", "GRAFT_TEST_NO_KEY", "--json"]
    try:
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
        stats = json.loads(res.stdout)["counts"]["extractor"]
        assert (stats["llm_ok"], stats["discarded"], stats["failed"], stats["fallback"]) == (10, 1, 1, 2)
        facets = pl.read_parquet(out / "facets.parquet")
        assert facets.filter(pl.col("text").str.starts_with("method of ")).height == 10
        assert (out / "cache" / "llm.sqlite").is_file()
        down.clear()  # the server is back: a rerun asks again for the failed paper alone
        hits = server.hits
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
        assert server.hits == hits + 1
        rerun = json.loads(res.stdout)
        assert rerun["reused_checkpoints"][0] == "facets (11 of 12 papers)"
        stats = rerun["counts"]["extractor"]
        assert (stats["llm_ok"], stats["discarded"], stats["failed"], stats["fallback"]) == (11, 1, 0, 1)
        assert stats["llm_requests"] == 1  # this run's traffic
        assert pl.read_parquet(out / "facets.parquet").filter(
            pl.col("text").str.starts_with("method of ")).height == 11
        hits = server.hits
        res = runner.invoke(app, args)  # and then every paper is served from the index's cache
        assert res.exit_code == 0, res.output
        assert server.hits == hits and json.loads(res.stdout)["reused_checkpoints"][0] == "facets"
    finally:
        server.close()
    res = runner.invoke(app, ["build", str(corpus), "--out", str(out), "--extractor", "llm"])
    assert res.exit_code == 2 and "--llm-base-url" in res.output


def test_eval_run_help_names_every_system() -> None:
    from eval.survey_suite import SYSTEMS as SURVEY_SYSTEMS
    from eval.systems import SYSTEMS

    res = runner.invoke(app, ["eval", "run", "--help"], env={"COLUMNS": "400"})
    assert res.exit_code == 0, res.output
    help_text = " ".join(res.output.replace("│", " ").split())
    listed = help_text.split("Comma-separated:", 1)[1].split(".", 1)[0]
    names = [n.strip() for part in listed.split(";") for n in part.split(":")[-1].split(",")]
    assert names == [*SYSTEMS, *SURVEY_SYSTEMS]


@pytest.mark.slow
def test_main_stops_on_sigterm_as_on_ctrl_c_and_names_a_disk_error_in_one_line(tmp_path) -> None:
    """SIGTERM (kill, job schedulers) stops `graft` as Ctrl-C does, so cleanups run: the temporary
    file of a write in progress goes (it was left behind); both print one line saying how to go on.
    A read-only or full disk is an error line, not a traceback."""
    import subprocess
    import sys

    script = f"""
import os, signal, time
import cli.app as cli_app
from graft.store import atomic_path

def command(**kwargs):
    with atomic_path({str(tmp_path / "graph.graphml")!r}) as tmp:
        tmp.write_text("half")
        os.kill(os.getpid(), signal.SIG{{}})
        time.sleep(30)

def read_only(**kwargs):
    raise OSError(30, "Read-only file system", {str(tmp_path / "idx" / "papers.parquet")!r})

cli_app.app = {{}}
cli_app.main()
"""
    for sig, code in (("TERM", 143), ("INT", 130)):
        res = subprocess.run([sys.executable, "-c", script.format(sig, "command")], cwd=REPO, capture_output=True,
                             text=True, timeout=120)
        assert res.returncode == code, res.stderr
        assert f"stopped (SIG{sig}): what was finished is kept; run the same command again" in res.stderr
        assert "Traceback" not in res.stderr and list(tmp_path.iterdir()) == []
    res = subprocess.run([sys.executable, "-c", script.format("TERM", "read_only")], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert f"error: {tmp_path / 'idx' / 'papers.parquet'}: Read-only file system" in res.stderr


def test_build_engine_options_are_checked_before_any_work(tmp_path) -> None:
    """An unknown engine, a cluster address for the local engine and local-only options for the Ray
    engine are refused with a message, and nothing is written."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(json.dumps({"id": "a", "title": "A", "abstract": "B"}) + "\n")
    for extra, message in ((["--engine", "spark"], "--engine 'spark' is unknown"),
                           (["--address", "auto"], "--address is an option of --engine ray"),
                           (["--engine", "ray", "--cache-from", str(tmp_path)], "options of the local engine")):
        res = runner.invoke(app, ["build", str(corpus), "--out", str(tmp_path / "idx"), *extra])
        assert res.exit_code == 2 and message in res.output, res.output
        assert not (tmp_path / "idx").exists()
