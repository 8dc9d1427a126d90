"""Outlines: level-1 sections over the reranked pool, level-2 subsections per section, and the
assignment of a section's papers to its subsections."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from graft.survey.types import Candidate


def level_one(topic: str, pool: Sequence[Candidate], backend, sections: int) -> list[tuple[str, str]]:
    """Section (heading, description) pairs for the survey; at least one."""
    out = backend.outline(topic, pool, sections)
    return out or [(topic, topic)]


def level_two(topic: str, section: str, papers: Sequence[Candidate], backend, subsections: int,
              avoid: set[str] = frozenset()) -> list[tuple[str, str]]:
    """Subsection (heading, description) pairs of one section; a section with few papers gets one
    subsection named after the section."""
    if subsections <= 1 or len(papers) < 4:
        return [(section, section)]
    out = backend.outline(f"{topic} {section}", papers, subsections, avoid)
    return out or [(section, section)]


def assign(papers: Sequence[Candidate], descriptions: Sequence[str], encode, paper_vectors: np.ndarray,
           row_of: dict[str, int], per_part: int, taken: set[str] = frozenset()) -> list[list[Candidate]]:
    """Give each part (subsection) its papers: every paper goes to the description it is closest to,
    each part keeps its `per_part` best, papers already written about elsewhere (`taken`) last."""
    if not descriptions:
        return []
    d = np.asarray(encode(list(descriptions)), dtype=np.float32)
    parts: list[list[tuple[float, int, Candidate]]] = [[] for _ in descriptions]
    for pos, c in enumerate(papers):
        sims = d @ paper_vectors[row_of[c.paper_id]]
        j = int(np.argmax(sims))
        parts[j].append((float(sims[j]), pos, c))
    out = []
    for part in parts:
        part.sort(key=lambda x: (x[2].paper_id in taken, -x[0], x[1]))
        out.append([c for _, _, c in part[:per_part]])
    return out
