"""A rebuild never destroys a trained model: `graft build` over an index that `graft train` trained
says, before any work, that the model will move aside, and moves it (with its DocIDs, pairs and the
manifest that records its training) to INDEX/model.previous-<build id> when it writes the new index."""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def write_corpus(folder: Path, n: int) -> Path:
    from graphbuild.corpus import load_corpus

    path = folder / f"corpus{n}.jsonl"
    path.write_text("".join(json.dumps({"id": r["paper_id"], "title": r["title"], "abstract": r["abstract"]}) + "\n"
                            for r in load_corpus(None, limit=n).papers.iter_rows(named=True)), encoding="utf-8")
    return path


def digest(folder: Path) -> dict[str, str]:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_rebuild_moves_the_trained_model_aside_and_says_so_before_any_work(tmp_path, encoder) -> None:
    from rich.console import Console

    from cli.build_cmd import print_build_summary
    from graft.index import Index
    from graft.progress import Reporter
    from graphbuild.build import BuildConfig, build_index
    from training.pipeline import train_index
    from training.trainer import TrainConfig

    out = tmp_path / "idx"
    build_index(write_corpus(tmp_path, 12), out, BuildConfig(), encoder=encoder)
    train_index(out, TrainConfig(max_steps=2, save_every_steps=0, logging_steps=1), base_model="tiny", check_pairs=0)
    old = json.loads((out / "manifest.json").read_text())
    trained = {name: digest(out / name) for name in ("model", "docids", "train")}
    assert trained["model"] and "train" in old["stages"]

    events: list[str] = []

    class Recording(Reporter):
        @contextmanager
        def stage(self, name, total=None, unit="items"):
            events.append(name)
            with super().stage(name, total, unit) as advance:
                yield advance

    notes: list[str] = []
    summary = build_index(write_corpus(tmp_path, 16), out, BuildConfig(), encoder=encoder,  # 4 papers added
                          reporter=Recording(quiet=True), on_note=lambda note: (notes.append(note), events.append("note")))
    aside = out / f"model.previous-{old['build_id'][:12]}"
    assert events[0] == "note" and events[1] == "load", events  # said before the corpus is even read
    assert len(notes) == 1 and f"{out / 'model'} holds a generative retriever trained on the graph this build " \
        f"replaces; when the new index is written it moves with its docids and train to {aside} (nothing is " \
        "deleted" in notes[0]
    # the model, its DocIDs and pairs, byte for byte, and the manifest that says how it was trained
    assert summary.kept == aside and summary.removed == []
    assert {name: digest(aside / name) for name in ("model", "docids", "train")} == trained
    assert json.loads((aside / "manifest.json").read_text()) == old
    assert not (out / "model").exists() and not (out / "docids").exists()
    # the new index answers (the teacher, until a model is trained on the new graph)
    idx = Index.open(out)
    assert idx.n == 16 and idx.searcher().paper(idx.paper_ids[0]).retriever == "teacher"
    console = Console(record=True, width=1000)
    print_build_summary(summary, console)
    assert f"moved the generative retriever trained on the graph this build replaced to {aside}" in console.export_text()

    # a second rebuild keeps the first one's model where it is, and has no model of its own to move
    notes.clear()
    again = build_index(write_corpus(tmp_path, 16), out, BuildConfig(top_k=5), encoder=encoder, on_note=notes.append)
    assert notes == [] and again.kept is None and digest(aside / "model") == trained["model"]


def test_graft_build_says_first_where_the_model_goes(tmp_path, encoder, monkeypatch) -> None:
    """Through the command line, with --quiet: the note is the first thing printed (on stderr)."""
    import shutil

    from typer.testing import CliRunner

    import graft.encoder
    from cli.app import app
    from graphbuild.build import BuildConfig, build_index

    monkeypatch.setattr(graft.encoder, "Encoder", lambda *args, **kwargs: encoder)
    out = tmp_path / "idx"
    build_index(write_corpus(tmp_path, 10), out, BuildConfig(), encoder=encoder)
    (out / "model").mkdir()  # what `graft train` wrote (its contents are not read by a rebuild)
    (out / "model" / "model.safetensors").write_bytes(b"27 minutes of training")
    shutil.copytree(out / "model", tmp_path / "before")
    build_id = json.loads((out / "manifest.json").read_text())["build_id"]
    res = CliRunner().invoke(app, ["build", str(write_corpus(tmp_path, 12)), "--out", str(out), "--quiet"])
    assert res.exit_code == 0, res.output
    aside = out / f"model.previous-{build_id[:12]}"
    assert res.output.startswith(f"note: {out / 'model'} holds a generative retriever trained on the graph this "
                                 "build replaces"), res.output
    assert str(aside) in " ".join(res.output.split())
    assert digest(aside / "model") == digest(tmp_path / "before") and not (out / "model").exists()
