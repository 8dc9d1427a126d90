"""What an index holds, and one paper's place in its graph: `graft info`.

`index_summary` reads the manifest only (no artefact is loaded): the corpus, the counts per facet,
the build's settings and which later stages (DocIDs, training pairs, a trained model) have run.
`paper_card` shows why a paper sits where it does: its facet items, its citation links inside the
corpus, and its strongest out-edges per facet with their weights, the edges the graph teacher walks
and the generative retriever learns.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from graft.facets import FACETS
from graft.index import Index
from graft.jsonio import read_json_file
from graft.manifest import has_model

#: Build settings shown by `index_summary`, in order (the rest is in manifest.json).
BUILD_SETTINGS = ("extractor", "top_k", "alpha", "beta", "title_weight", "item_context", "lexical_weight",
                  "text_lexical_weight", "citation_rescale", "n_candidates", "linked_candidates", "citation_partners")


def index_summary(index: Index) -> dict[str, Any]:
    """The index at a glance, from its manifest: JSON-ready."""
    m = index.manifest
    stages = m.get("stages", {})
    build = stages.get("build", {})
    config, counts = build.get("config", {}), build.get("counts", {})
    embedding = m.get("embedding", {})
    out: dict[str, Any] = {
        "index": str(index.path),
        "format_version": m.get("format_version"),
        "corpus_hash": m.get("corpus_hash"),
        "corpus_source": (m.get("corpus") or {}).get("source"),
        "built_at": build.get("finished_at"),
        "papers": counts.get("papers"),
        "citations": counts.get("citations"),
        "facets": {f: {"items": (counts.get("facet_items") or {}).get(f), "edges": (counts.get("edges") or {}).get(f),
                       "share_with_incoming_edge": (counts.get("share_with_incoming_edge") or {}).get(f)}
                   for f in FACETS},
        "embedding": {"model": embedding.get("model"), "backend": embedding.get("backend", "torch"),
                      "dim": embedding.get("dim")},
        "build": {k: config.get(k) for k in BUILD_SETTINGS if k in config},
        "stages": sorted(stages),
    }
    llm = counts.get("extractor") if isinstance(counts.get("extractor"), dict) else {}
    if llm.get("fallback"):  # the LLM extractor's papers that got the heuristic's items instead
        out["extractor_fallback"] = {"papers": llm.get("papers", counts.get("papers")), "fallback": llm["fallback"],
                                     "failed": llm.get("failed", 0), "discarded": llm.get("discarded", 0)}
    docids = stages.get("docids", {}).get("counts")
    if docids:
        out["docids"] = {f: (docids.get(f) or {}).get("docids") for f in FACETS}
    pairs = stages.get("pairs", {})
    if pairs:
        pc = pairs.get("counts", {})
        out["pairs"] = {"pairs": pc.get("pairs"), "sampling": (pairs.get("config") or {}).get("sampling"),
                        "papers_share": pc.get("papers_share"), "docids_share": pc.get("docids_share")}
    train = stages.get("train", {})
    if train and has_model(index.path):
        tc = train.get("config", {})
        out["model"] = {"base_model": (tc.get("base_model") or {}).get("name"), "sampling": tc.get("sampling"),
                        "steps": (train.get("counts") or {}).get("steps"), "final_loss": train.get("final_loss"),
                        "trained_at": train.get("finished_at"), "check": train.get("check")}
    elif (unfinished := unfinished_training(index.path)) is not None:
        out["unfinished_model"] = unfinished
    return out


def unfinished_training(index_dir: str | Path) -> dict[str, Any] | None:
    """A training of `INDEX/model` stopped before its final save, as its newest checkpoint records it:
    the step reached, the run's steps, and the settings that resume it (the same ones); None when
    there is no checkpoint."""
    folder = Path(index_dir) / "model" / "checkpoints"
    states = sorted((int(p.parent.name[5:]), p) for p in folder.glob("step-*/trainer_state.json")
                    if p.parent.name[5:].isdigit()) if folder.is_dir() else []
    if not states:
        return None
    step, path = states[-1]
    try:
        state = read_json_file(path)
    except (ValueError, OSError):
        return {"step": step, "total_steps": None, "base_model": None, "sampling": None, "max_edges": None,
                "config": {}}
    record, config = state.get("record") or {}, state.get("config") or {}
    return {"step": int(state.get("step", step)), "total_steps": (state.get("layout") or {}).get("total_steps"),
            "base_model": (record.get("base_model") or {}).get("name"), "sampling": record.get("sampling"),
            "max_edges": (record.get("distill") or {}).get("max_edges_per_source")
            if record.get("sampling") == "coverage" else None,
            "config": {k: config.get(k) for k in ("epochs", "max_steps", "batch_size", "lr") if k in config}}


def paper_card(index: Index, paper_id: str, k: int = 5) -> dict[str, Any]:
    """One corpus paper: its metadata, facet items, citation links inside the corpus and its `k`
    strongest out-edges per facet (paper id, title, weight), JSON-ready.

    Raises:
        GraftError: the id is not in the index.
    """
    node = index.row(paper_id)
    meta = index.paper_record(node)
    titles = index.paper_column("title")
    edges: dict[str, list[dict[str, Any]]] = {}
    for facet in FACETS:
        row = index.graphs[facet].getrow(node)
        order = np.lexsort((row.indices, -row.data))[:k]  # heaviest first, ties by row
        edges[facet] = [{"paper_id": index.paper_ids[int(j)], "title": titles[int(j)],
                         "weight": round(float(w), 4)} for j, w in zip(row.indices[order], row.data[order])]
    ids = index.paper_ids
    cited = sorted(ids[int(j)] for j in index.citation_matrix[node].indices)
    citing = sorted(ids[int(j)] for j in index.cited_by[node].indices)
    return {"paper_id": paper_id, "title": meta.get("title"), "year": meta.get("year"), "venue": meta.get("venue"),
            "facets": index.paper_facets(paper_id), "references_in_corpus": len(cited),
            "cited_by_in_corpus": len(citing), "cites": cited, "cited_by": citing, "edges": edges}
