"""Realistic synthetic corpora of any size from a real one: abstracts recombined from real abstracts'
sentences within a topic, topic-local citations with a heavy-tailed in-degree distribution.

The real corpus's papers are clustered into topics (TF-IDF of title + abstract, k-means). A synthetic
paper draws a topic (as often as the real papers fall in it), a title of that topic, and an abstract
of as many sentences as a real abstract of the topic has, its i-th sentence drawn from the topic's
sentences at the same relative place (openings open, conclusions close). Papers are dated in id
order over the real corpus's years; each cites as many earlier papers as a real paper of the corpus
does (its reference count drawn from the real in-corpus counts), `--local` of them in its topic, the
rest anywhere, each target drawn with probability proportional to (citations so far + 1):
preferential attachment, so in-degrees are heavy-tailed as real ones are.

Every synthetic paper records the real papers its sentences came from (`sources`), so that a
benchmark can give it those papers' vectors without encoding it (`experiments/scale_graph.py`).

    python -m experiments.synth_corpus --papers 100000 --out /tmp/synth-1e5.jsonl.gz
        [--source ../shared/data/cs768/papers.jsonl.gz] [--topics 64] [--local 0.8] [--seed 0]
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from pathlib import Path

import numpy as np

from experiments.common import parser

CS768 = Path(__file__).resolve().parents[2] / "shared" / "data" / "cs768" / "papers.jsonl.gz"
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
PLACES = 3  # relative places of a sentence in its abstract: opening, middle, closing


def read_source(path: Path) -> list[dict]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def topics_of(papers: list[dict], k: int, seed: int) -> np.ndarray:
    """Topic of each paper: k-means over TF-IDF vectors of title + abstract."""
    from sklearn.cluster import MiniBatchKMeans
    from sklearn.feature_extraction.text import TfidfVectorizer

    tfidf = TfidfVectorizer(max_features=20000, stop_words="english", sublinear_tf=True)
    x = tfidf.fit_transform([f"{p['title']} {p['abstract']}" for p in papers])
    return MiniBatchKMeans(n_clusters=k, random_state=seed, n_init=3, batch_size=4096).fit_predict(x)


def place(i: int, count: int) -> int:
    return 0 if i == 0 else PLACES - 1 if i == count - 1 else 1


def generate(papers: list[dict], n: int, *, topics: int = 64, local: float = 0.8, seed: int = 0):
    """Yield n synthetic records (id, title, abstract, year, venue, authors, references, topic, sources)."""
    rng = np.random.default_rng(seed)
    topic = topics_of(papers, topics, seed)
    ids = {p["id"] for p in papers}
    sentences: dict[tuple[int, int], list[tuple[str, int]]] = {}
    lengths: dict[int, list[int]] = {}
    for row, (p, t) in enumerate(zip(papers, topic)):
        parts = [s.strip() for s in _SENTENCE.split(p["abstract"]) if s.strip()]
        lengths.setdefault(int(t), []).append(len(parts))
        for i, s in enumerate(parts):
            sentences.setdefault((int(t), place(i, len(parts))), []).append((s, row))
    members = {t: np.flatnonzero(topic == t) for t in range(topics)}
    weights = np.bincount(topic, minlength=topics) / len(papers)
    ref_counts = np.array([sum(r in ids for r in p.get("references") or []) for p in papers])
    years = sorted(int(p["year"]) for p in papers if p.get("year"))
    lo, hi = (years[0], years[-1]) if years else (2000, 2020)
    # urns: a paper is in its topic's urn and the global one once, plus once per citation it gets, so a
    # uniform draw from an urn is a draw proportional to (citations so far + 1)
    urn: list[int] = []
    topic_urn: dict[int, list[int]] = {t: [] for t in range(topics)}
    topic_of = np.zeros(n, dtype=np.int64)
    for i in range(n):
        t = int(rng.choice(topics, p=weights))
        topic_of[i] = t
        title_src = int(rng.choice(members[t]))
        length = int(rng.choice(lengths[t]))
        picks = []
        for j in range(length):
            pool = sentences.get((t, place(j, length))) or sentences[(t, 1)]
            picks.append(pool[int(rng.integers(len(pool)))])
        want = min(int(rng.choice(ref_counts)), i)
        refs: set[int] = set()
        n_local = min(int(round(local * want)), len(set(topic_urn[t])))
        for pool, count in ((topic_urn[t], n_local), (urn, want - n_local)):
            goal, tries = len(refs) + count, 0
            while len(refs) < goal and pool and tries < 20 * count:
                refs.add(pool[int(rng.integers(len(pool)))])
                tries += 1
        for r in refs:
            urn.append(r)
            topic_urn[int(topic_of[r])].append(r)
        urn.append(i)
        topic_urn[t].append(i)
        src = papers[title_src]
        yield {"id": f"S{i:07d}", "title": src["title"], "abstract": " ".join(s for s, _ in picks),
               "year": lo + (hi - lo) * i // max(n - 1, 1), "venue": src.get("venue"),
               "authors": src.get("authors") or [], "references": [f"S{r:07d}" for r in sorted(refs)],
               "topic": t, "sources": [papers[row]["id"] for _, row in picks] + [src["id"]]}


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--papers", type=int, required=True, help="synthetic papers to write")
    ap.add_argument("--out", required=True, help="the JSONL(.gz) file to write")
    ap.add_argument("--source", default=str(CS768), help="the real corpus (JSONL, .gz) to recombine")
    ap.add_argument("--topics", type=int, default=64, help="k-means topics of the real corpus")
    ap.add_argument("--local", type=float, default=0.8, help="share of a paper's references inside its topic")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.papers < 1 or not 0 <= args.local <= 1:
        ap.error("--papers must be >= 1 and --local in [0, 1]")
    papers = [p for p in read_source(Path(args.source)) if p.get("abstract") and p.get("title")]
    out = Path(args.out)
    opener = gzip.open if out.name.endswith(".gz") else open
    degrees = []
    with opener(out, "wt", encoding="utf-8") as fh:
        for rec in generate(papers, args.papers, topics=args.topics, local=args.local, seed=args.seed):
            fh.write(json.dumps(rec) + "\n")
            degrees.append(len(rec["references"]))
    print(f"{args.papers:,} papers, {sum(degrees):,} citations ({np.mean(degrees):.1f} a paper) -> {out}",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
