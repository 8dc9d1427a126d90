"""Can facet similarity alone beat one embedding of the abstract? Exact per-facet rankings of a
split's in-corpus queries for several ways of representing a paper's facets, beside plain dense
retrieval, all from the same index.

Every row ranks the whole corpus for each query (no top-K graph cut, no walk), so it shows what the
representation itself carries; the `facet` system of `graft eval` (facet-only graphs, two-hop walks,
RRF) scores close to the "RRF" column of the index's own items. Variants:

- `items` — the index's facet items as its build embedded them (each item alone, its title mixed in
  at the build's title weight), s_f = symmetric mean best-match cosine (the graph's similarity);
- `centred` / `pc3` — `items` with what all items of a facet share taken out before the title is
  mixed in: the facet's mean item vector (`centred`), or the mean and its top 3 principal directions
  (`pc3`), a corpus-level down-weighting of generic items ("we achieve state-of-the-art results");
- `joined` — one vector per paper and facet: the facet's items joined into one text, embedded, the
  title mixed in at the same weight;
- `joined+title` — the same text prefixed with the title ("TITLE. ITEMS"), embedded as one;
- `adapter` — `items` after a residual two-layer adapter on the frozen embeddings (x + MLP(x),
  renormalised), trained with in-batch contrastive loss on the index's own citation links (paper,
  title and same-facet item pairs of linked papers; a leak-free index holds no link of its queries),
  applied to papers, titles and items alike; its `dense` column is the adapted dense;
- `late` — each item's vector read in its paper's context ("late chunking",
  `graft.encoder.ContextReader`): the whole "Title. Abstract" goes through the encoder once (its
  token window, 256 for MiniLM) and an item's vector is the mean of its own tokens' contextual
  embeddings, so "the proposed method" carries what the abstract says it is; an item not found in
  the text (case and whitespace folded) or past the window keeps its own vector; no title mixed in
  (the context holds it); `late+title` mixes the title in as `items` does;
- `idf` — `items` with each item weighted by how specific it is, an IDF over items: weight = 1 − the
  mean cosine of its 20 nearest items of the same facet in other papers, so a generic item ("we
  achieve state-of-the-art results") with many near copies counts little in the mean best match.
- `words` — the index's own item vectors (`embeddings/items.npy`, as its build made them) with word
  overlap blended in as a build does (`graft.lexical`): s_f = (1 − λ)·s_f + λ·(the TF-IDF cosine of
  the two papers' title and items of the facet), one row per λ of `--lexical-weights`.

Per variant: R@20 of each facet alone, of the RRF of the four facet rankings (k = 60) and of their
score sum, and dense R@20 (title + abstract) for the same encoder.

    python -m experiments.facet_levers --split SPLITDIR [--part dev] [--variants items,joined,joined+title,adapter]
        [--epochs 3] [--late-weights 0,0.35,0.7] [--lexical-weights 0,0.35] [--name cs768]

Writes docs/results/facet_levers_{name}.{md,json}. Tune on `dev`.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from experiments.common import open_split_queries, split_parser, split_report, write_tables

VARIANTS = ("items", "centred", "pc3", "joined", "joined+title", "adapter", "late", "late+title", "idf", "words")
RRF_K = 60


def recall_at(scores_of: Any, rows: dict[str, int], gold: dict[str, set[int]], k: int = 20) -> float:
    """Mean Recall@k (`eval.metrics.recall_at`) over queries of a full ranking `scores_of(row)` (the
    query itself left out)."""
    from eval.metrics import recall_at as recall

    out = []
    for qid, r in rows.items():
        s = np.asarray(scores_of(r), dtype=np.float64).copy()
        s[r] = -np.inf
        out.append(recall(np.argpartition(-s, min(k, len(s)) - 1)[:k].tolist(), gold[qid], k))
    return float(np.mean(out))


def ranks(scores: np.ndarray, r: int) -> np.ndarray:
    """1-based rank of every paper in one query's scores (the query last)."""
    s = np.asarray(scores, dtype=np.float64).copy()
    s[r] = -np.inf
    out = np.empty(len(s))
    out[np.argsort(-s, kind="stable")] = np.arange(1, len(s) + 1)
    return out


def facet_rows(vectors: np.ndarray, owner: np.ndarray, facet_col: np.ndarray, n: int,
               rows: list[int]) -> dict[str, dict[int, np.ndarray]]:
    """facet -> query row -> its exact mean best-match similarity to every paper (`graft.similarity`)."""
    from graft.facets import FACETS
    from graft.similarity import group_items, score_pairs

    out = {}
    for f in FACETS:
        sel = facet_col == f
        items = group_items(owner[sel], vectors[sel], n)
        out[f] = {r: score_pairs(items, np.full(n, r), items, np.arange(n)) for r in rows}
    return out


def vector_rows(vectors: dict[str, np.ndarray], rows: list[int]) -> dict[str, dict[int, np.ndarray]]:
    """facet -> query row -> cosine to every paper, from one vector per paper and facet."""
    return {f: {r: v @ v[r] for r in rows} for f, v in vectors.items()}


def score_variant(per_facet: dict[str, dict[int, np.ndarray]], papers: np.ndarray, rows: dict[str, int],
                  gold: dict[str, set[int]]) -> dict[str, float]:
    """R@20 of each facet, of their RRF and score sum, and of dense over `papers`."""
    row = {f: recall_at(lambda r, s=s: s[r], rows, gold) for f, s in per_facet.items()}
    row["RRF"] = recall_at(lambda r: sum(1.0 / (RRF_K + ranks(s[r], r)) for s in per_facet.values()), rows, gold)
    row["sum"] = recall_at(lambda r: sum(s[r] for s in per_facet.values()), rows, gold)
    row["dense"] = recall_at(lambda r: papers @ papers[r], rows, gold)
    return row


def without_common(alone: np.ndarray, facet_col: np.ndarray, directions: int) -> np.ndarray:
    """Unit item vectors less their facet's mean vector and its first `directions` principal
    directions (computed on up to 8,000 of the facet's items)."""
    out = np.array(alone, dtype=np.float32)
    rng = np.random.default_rng(0)
    for f in np.unique(facet_col):
        sel = facet_col == f
        x = out[sel] - out[sel].mean(axis=0)
        if directions:
            sample = x[rng.choice(len(x), min(len(x), 8000), replace=False)]
            top = np.linalg.svd(sample, full_matrices=False)[2][:directions]
            x = x - (x @ top.T) @ top
        out[sel] = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    return out


def joined_texts(idx: Any, with_title: bool) -> dict[str, list[str]]:
    """facet -> per paper, its items of that facet joined (prefixed by the title when asked)."""
    from graft.facets import FACETS

    joined: dict[str, list[list[str]]] = {f: [[] for _ in range(idx.n)] for f in FACETS}
    for r, f, t in zip(idx.item_rows.tolist(), idx.facets["facet"].to_list(), idx.facets["text"].to_list()):
        joined[f][r].append(t)
    titles = idx.papers["title"].to_list()
    return {f: [(f"{titles[r]}. " if with_title else "") + " ".join(parts) for r, parts in enumerate(lists)]
            for f, lists in joined.items()}


def item_specificity(vectors: np.ndarray, owner: np.ndarray, facet_col: np.ndarray, k: int = 20,
                     block: int = 2048) -> np.ndarray:
    """1 − mean cosine of each item to its `k` nearest items of the same facet owned by other
    papers (clipped to >= 0.05): low for generic items with many near copies in the corpus."""
    out = np.ones(len(vectors), dtype=np.float32)
    for f in np.unique(facet_col):
        sel = np.flatnonzero(facet_col == f)
        x, own = np.asarray(vectors[sel], dtype=np.float32), owner[sel]
        for s in range(0, len(sel), block):
            sims = x[s : s + block] @ x.T
            sims[own[s : s + block, None] == own[None, :]] = -np.inf  # the paper's own items
            top = -np.partition(-sims, k - 1, axis=1)[:, :k]
            out[sel[s : s + block]] = np.clip(1.0 - top.mean(axis=1), 0.05, None)
    return out


def weighted_facet_rows(vectors: np.ndarray, weights: np.ndarray, owner: np.ndarray, facet_col: np.ndarray,
                        n: int, rows: list[int]) -> dict[str, dict[int, np.ndarray]]:
    """`facet_rows` with a weighted mean best match: each side's best-match cosines averaged with
    its items' `weights`."""
    from graft.facets import FACETS
    from graft.similarity import group_items

    out = {}
    for f in FACETS:
        sel = facet_col == f
        items = group_items(owner[sel], vectors[sel], n)
        wpad = group_items(owner[sel], weights[sel, None], n).padded[:, :, 0]  # 0 on padding
        out[f] = {}
        for r in rows:
            q, qw = items.padded[r][items.mask[r]], wpad[r][items.mask[r]]
            if not len(q):
                out[f][r] = np.zeros(n, dtype=np.float32)
                continue
            sims = np.einsum("ld,nmd->nlm", q, items.padded, optimize=True)
            sims = np.where(items.mask[:, None, :], sims, -np.inf)
            q_best = sims.max(axis=2)  # (n, L): each query item's best match in each paper
            p_best = np.where(items.mask, sims.max(axis=1), 0.0)  # (n, W): each paper item's best in the query
            q_mean = (q_best * qw[None, :]).sum(axis=1) / max(float(qw.sum()), 1e-12)
            p_mean = (p_best * wpad).sum(axis=1) / np.maximum(wpad.sum(axis=1), 1e-12)
            out[f][r] = np.where(items.mask.any(axis=1), 0.5 * (q_mean + p_mean), 0.0).astype(np.float32)
    return out


def late_item_vectors(encoder: Any, idx: Any, fallback: np.ndarray) -> tuple[np.ndarray, float]:
    """Unit vectors of the index's items read in their paper's context (`graft.encoder.ContextReader`,
    the encoder's token window), `fallback` rows where an item is not found; and the share found."""
    from graft.encoder import ContextReader, context_keys, read_found, read_or_alone

    read = ContextReader(encoder).encode(context_keys(idx.papers, idx.facets))
    return read_or_alone(read, fallback), float(read_found(read).mean())


def train_adapter(papers: np.ndarray, titles: np.ndarray, items: np.ndarray, idx: Any, epochs: int,
                  seed: int = 0) -> Any:
    """A residual adapter x -> unit(x + MLP(x)) trained on the index's citation links: for each
    linked pair, their papers' vectors, titles' vectors and one same-facet item pair are positives,
    the batch's other pairs negatives (symmetric InfoNCE, temperature 0.05, batch 256, Adam 3e-4)."""
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    a = idx.citation_matrix.tocoo()
    links = np.array(sorted({(min(i, j), max(i, j)) for i, j in zip(a.row.tolist(), a.col.tolist()) if i != j}))
    by_facet: dict[tuple[int, str], list[int]] = {}
    for k, (r, f) in enumerate(zip(idx.item_rows.tolist(), idx.facets["facet"].to_list())):
        by_facet.setdefault((r, f), []).append(k)
    facets = sorted({f for _, f in by_facet})
    d = papers.shape[1]

    class Adapter(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 1024), torch.nn.GELU(), torch.nn.Linear(1024, d))
            torch.nn.init.zeros_(self.mlp[2].weight)
            torch.nn.init.zeros_(self.mlp[2].bias)

        def forward(self, x: Any) -> Any:
            return torch.nn.functional.normalize(x + self.mlp(x), dim=-1)

    model = Adapter()
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    tensors = {name: torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
               for name, x in (("paper", papers), ("title", titles), ("item", items))}

    def item_pair(i: int, j: int) -> tuple[int, int] | None:
        shared = [f for f in facets if (i, f) in by_facet and (j, f) in by_facet]
        if not shared:
            return None
        f = shared[rng.integers(len(shared))]
        return int(rng.choice(by_facet[(i, f)])), int(rng.choice(by_facet[(j, f)]))

    for _ in range(epochs):
        order = rng.permutation(len(links))
        for s in range(0, len(order), 256):
            pairs = links[order[s : s + 256]]
            pairs = np.where((rng.random(len(pairs)) < 0.5)[:, None], pairs[:, ::-1], pairs)
            item_pairs = [p for p in (item_pair(i, j) for i, j in pairs) if p is not None]
            loss = 0.0
            for name, (left, right) in (("paper", (pairs[:, 0], pairs[:, 1])), ("title", (pairs[:, 0], pairs[:, 1])),
                                        ("item", ([p[0] for p in item_pairs], [p[1] for p in item_pairs]))):
                x, y = model(tensors[name][left]), model(tensors[name][right])
                logits = x @ y.T / 0.05
                target = torch.arange(len(x))
                loss = loss + 0.5 * (torch.nn.functional.cross_entropy(logits, target)
                                     + torch.nn.functional.cross_entropy(logits.T, target))
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()

    def apply(x: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return model(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))).numpy()

    return apply


def word_rows(idx: Any, owner: np.ndarray, facet_col: np.ndarray, query_rows: list[int], papers: np.ndarray,
              rows: dict[str, int], gold: dict[str, set[int]], weights: list[float]) -> list[dict[str, Any]]:
    """`words` rows: the index's item vectors' exact facet similarity blended with the TF-IDF cosine of
    each paper's title and items of the facet at each weight (`graft.lexical`)."""
    from graft.facets import FACETS
    from graft.lexical import Lexicon, blend, facet_texts
    from graft.text import paper_texts

    built = facet_rows(np.asarray(idx.item_embeddings, dtype=np.float32), owner, facet_col, idx.n, query_rows)
    lexicon = Lexicon.fit(paper_texts(idx.papers))
    joined = facet_texts(idx.papers["title"].to_list(), owner, facet_col, idx.facets["text"].to_list(), idx.n)
    words = {}
    for f in FACETS:
        m = lexicon.vectors(joined[f])
        words[f] = {r: (m @ m[r].T).toarray().ravel() for r in query_rows}
    out = []
    for w in weights:
        t0 = time.perf_counter()
        per_facet = {f: {r: blend(built[f][r], words[f][r], w) for r in query_rows} for f in FACETS}
        out.append({"variant": f"words λ={w:g}", **score_variant(per_facet, papers, rows, gold),
                    "seconds": round(time.perf_counter() - t0, 1)})
        print(f"{out[-1]['variant']}: RRF {out[-1]['RRF']:.3f}", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = split_parser(__doc__, table="facet_levers", part="dev")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(VARIANTS)}")
    ap.add_argument("--epochs", type=int, default=3, help="adapter: passes over the citation links")
    ap.add_argument("--late-weights", default="", help="late+title: title weights to try (comma-separated; "
                                                       "default: the index's own)")
    ap.add_argument("--lexical-weights", default="0,0.35", help="words: lexical weights to try (comma-separated)")
    args = ap.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    if not variants or any(v not in VARIANTS for v in variants):
        ap.error(f"--variants takes a comma-separated list of {', '.join(VARIANTS)}")

    from graft.build_config import BuildConfig
    from graft.encoder import Encoder, title_vectors, with_title

    opened = open_split_queries(args, paper_embeddings=True)
    idx, rows, gold = opened.index, opened.rows, opened.gold
    config = BuildConfig.from_manifest(idx.manifest)
    encoder = Encoder(config.embedding_model, batch_size=config.embedding_batch_size)
    t0 = time.perf_counter()
    owner, facet_col = idx.item_rows, idx.facets["facet"].to_numpy()
    papers = np.asarray(idx.paper_embeddings, dtype=np.float32)
    alone = np.asarray(idx.item_text_embeddings, dtype=np.float32)
    titles = title_vectors(encoder, idx.papers["title"].to_list())
    w = config.title_weight
    query_rows = sorted(set(rows.values()))
    late = None  # items read in context, made once for `late` and `late+title`
    table = []
    for variant in variants:
        t1 = time.perf_counter()
        if variant in ("items", "centred", "pc3"):
            base = alone if variant == "items" else without_common(alone, facet_col, 3 if variant == "pc3" else 0)
            per_facet = facet_rows(with_title(base, titles[owner], w), owner, facet_col, idx.n, query_rows)
            dense = papers
        elif variant in ("joined", "joined+title"):
            texts = joined_texts(idx, variant == "joined+title")
            vectors = {f: np.asarray(encoder.encode(t), dtype=np.float32) for f, t in texts.items()}
            if variant == "joined":
                vectors = {f: with_title(v, titles, w) for f, v in vectors.items()}
            per_facet, dense = vector_rows(vectors, query_rows), papers
        elif variant == "idf":
            items = with_title(alone, titles[owner], w)
            weights = item_specificity(alone, owner, facet_col)
            print(f"idf: item weights mean {weights.mean():.3f}, 10th-90th percentile "
                  f"{np.percentile(weights, 10):.3f}-{np.percentile(weights, 90):.3f}", file=sys.stderr, flush=True)
            per_facet = weighted_facet_rows(items, weights, owner, facet_col, idx.n, query_rows)
            dense = papers
        elif variant == "words":
            table += word_rows(idx, owner, facet_col, query_rows, papers, rows, gold,
                               [float(x) for x in args.lexical_weights.split(",") if x.strip()])
            continue
        elif variant in ("late", "late+title"):
            if late is None:
                late, share = late_item_vectors(encoder, idx, alone)
                print(f"late: {share:.1%} of items read in context", file=sys.stderr, flush=True)
            if variant == "late+title" and args.late_weights:
                for lw in (float(x) for x in args.late_weights.split(",") if x.strip()):
                    t2 = time.perf_counter()
                    per_facet = facet_rows(with_title(late, titles[owner], lw), owner, facet_col, idx.n, query_rows)
                    table.append({"variant": f"late+title w={lw:g}", **score_variant(per_facet, papers, rows, gold),
                                  "seconds": round(time.perf_counter() - t2, 1)})
                    print(f"{table[-1]['variant']}: RRF {table[-1]['RRF']:.3f}", file=sys.stderr, flush=True)
                continue
            items = late if variant == "late" else with_title(late, titles[owner], w)
            per_facet, dense = facet_rows(items, owner, facet_col, idx.n, query_rows), papers
        else:
            adapt = train_adapter(papers, titles, alone, idx, args.epochs)
            items = with_title(adapt(alone), adapt(titles)[owner], w)
            per_facet, dense = facet_rows(items, owner, facet_col, idx.n, query_rows), adapt(papers)
        row = {"variant": variant, **score_variant(per_facet, dense, rows, gold),
               "seconds": round(time.perf_counter() - t1, 1)}
        table.append(row)
        print(f"{variant}: RRF {row['RRF']:.3f} sum {row['sum']:.3f} dense {row['dense']:.3f}", file=sys.stderr,
              flush=True)

    name, meta, lines = split_report(opened, args, "facet_levers", argv, "Facet representations against dense",
                                     f"queries · encoder {encoder.name} · title weight {w:g}",
                                     seconds=round(time.perf_counter() - t0, 1))
    lines += ["| variant | problem | method | result | contribution | RRF | sum | dense | seconds |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in table:
        lines.append(f"| {r['variant']} | " + " | ".join(f"{r[c]:.3f}" for c in
                     ("problem", "method", "result", "contribution", "RRF", "sum", "dense")) + f" | {r['seconds']} |")
    lines += ["", "- R@20 over the whole corpus per query: one facet's exact similarity, the RRF (k = 60) of the "
              "four facet rankings, their score sum, and dense (title + abstract) for the same encoder",
              "- adapter: residual MLP on the frozen embeddings, trained on the index's citation links "
              f"({args.epochs} passes); its dense is the adapted paper vectors"]
    write_tables(args.results, f"facet_levers_{name}", meta, table, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
