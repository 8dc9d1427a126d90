"""Adaptive citation verification.

Every (sentence, cited paper) pair is checked by the backend (`check`). On failure, evidence for the
sentence is retrieved from the corpus (`evidence`: facet items of the claim's facet nearest the
sentence), and

- if another citation of the sentence already supports it, the failed citation is *replaced* by the
  best evidence paper, which is checked in the next round;
- otherwise the sentence is *rewritten* with the evidence (`rewrite`) and its new citations are
  checked in the next round;

up to K rounds (K = 3 in the reference method). A citation still unsupported after K rounds is
*removed*; a sentence left without a supported citation is dropped from survey.md. Nothing is left
unverified silently: every citation ends as verified, repaired (its sentence was rewritten),
replaced, removed, or — only when verification is switched off — unverified, and each round's
verdict is logged on the sentence.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from graft.survey.types import Citation, Round, Sentence

#: Citation states that count as supported in the final survey.
SUPPORTED = ("verified", "repaired", "replaced")


def resolve(sentence: Sentence, corpus_ids: set[str]) -> int:
    """Remove citations that are not corpus papers (an LLM writer may invent keys); returns how many."""
    n = 0
    for c in sentence.citations:
        if c.paper_id not in corpus_ids and c.status != "removed":
            c.status = "removed"
            c.note = "not a corpus paper"
            n += 1
    return n


def verify_sentence(sentence: Sentence, backend: Any, *, rounds: int, pool: Sequence[str],
                    attribution: dict[str, dict[str, float]], corpus_ids: set[str]) -> None:
    """Verify one sentence in place (see the module docstring)."""
    resolve(sentence, corpus_ids)
    origin = {id(c): "original" for c in sentence.citations}
    rewritten = False
    for r in range(1, rounds + 1):
        pending = [c for c in sentence.citations if c.status == "pending"]
        failed: list[Citation] = []
        for c in pending:
            v = backend.check(sentence.text, sentence.facet, c.paper_id)
            sentence.rounds.append(Round(r, c.paper_id, v.supported, v.score, v.facet, backend.name))
            if v.supported:
                kind = origin.get(id(c), "original")
                c.status = {"original": "verified", "replacement": "replaced", "rewrite": "repaired"}[kind]
                if kind == "original" and rewritten:
                    c.status = "repaired"
            else:
                failed.append(c)
        if not failed:
            return
        if r == rounds:
            for c in failed:
                c.status = "removed"
                c.note = f"unsupported after {rounds} round(s)"
                _mark(sentence, r, c.paper_id, "remove")
            break
        cited = {c.paper_id for c in sentence.citations}
        evidence = backend.evidence(sentence.text, sentence.facet, exclude=cited, prefer=pool)
        if any(c.status in SUPPORTED for c in sentence.citations):
            for c in failed:
                c.status = "removed"
                _mark(sentence, r, c.paper_id, "replace")
                ev = next((e for e in evidence if e.paper_id not in cited), None)
                if ev is None:
                    c.note = f"unsupported in round {r}; no evidence paper to replace it"
                    continue
                c.note = f"unsupported in round {r}; replaced by {ev.paper_id}"
                cited.add(ev.paper_id)
                new = Citation(paper_id=ev.paper_id, facets=dict(attribution.get(ev.paper_id, {})),
                               replaced=c.paper_id)
                origin[id(new)] = "replacement"
                sentence.citations.append(new)
            continue
        draft = backend.rewrite(sentence.text, sentence.facet, evidence)
        for c in failed:
            c.status = "removed"
            c.note = f"unsupported in round {r}; sentence rewritten with evidence" if draft else \
                f"unsupported in round {r}; no evidence found"
            _mark(sentence, r, c.paper_id, "rewrite" if draft else "remove")
        if draft is None:
            break
        sentence.original = sentence.original or sentence.text
        sentence.text, sentence.facet = draft.text, draft.facet
        rewritten = True
        for pid in dict.fromkeys(draft.citations):
            if pid in {c.paper_id for c in sentence.citations if c.status != "removed"}:
                continue
            new = Citation(paper_id=pid, facets=dict(attribution.get(pid, {})))
            origin[id(new)] = "rewrite"
            sentence.citations.append(new)
        resolve(sentence, corpus_ids)
    if not any(c.status in SUPPORTED for c in sentence.citations):
        sentence.dropped = True
        sentence.note = "no supported citation"


def _mark(sentence: Sentence, r: int, paper_id: str, action: str) -> None:
    for rd in reversed(sentence.rounds):
        if rd.round == r and rd.paper_id == paper_id:
            rd.action = action
            return


def verify_all(sentences: Sequence[Sentence], backend: Any, *, rounds: int, pool: Sequence[str],
               attribution: dict[str, dict[str, float]], corpus_ids: set[str], max_concurrency: int = 1,
               progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Verify every sentence (in parallel up to `max_concurrency`) and count the outcomes.

    Returns:
        {"citations": status -> count, "sentences_dropped", "sentences_rewritten", "checks"}.
    """
    lock = threading.Lock()

    def one(s: Sentence) -> None:
        verify_sentence(s, backend, rounds=rounds, pool=pool, attribution=attribution, corpus_ids=corpus_ids)
        if progress is not None:
            with lock:
                progress(1)

    if max_concurrency > 1 and len(sentences) > 1:
        with ThreadPoolExecutor(max_workers=max_concurrency, thread_name_prefix="graft-verify") as ex:
            list(ex.map(one, sentences))
    else:
        for s in sentences:
            one(s)
    return summarize(sentences)


def mark_unverified(sentences: Sequence[Sentence], corpus_ids: set[str]) -> dict[str, Any]:
    """Verification switched off: resolve ids and label every remaining citation `unverified`."""
    for s in sentences:
        resolve(s, corpus_ids)
        for c in s.citations:
            if c.status == "pending":
                c.status = "unverified"
                c.note = "verification switched off"
        if not s.cited():
            s.dropped = True
            s.note = "no corpus paper cited"
    return summarize(sentences)


def drop_duplicates(sentences: Sequence[Sentence]) -> int:
    """Drop kept sentences whose text repeats an earlier kept one (a rewrite can restate a sentence
    written elsewhere); returns how many."""
    seen: set[str] = set()
    n = 0
    for s in sentences:
        if s.dropped:
            continue
        key = " ".join(s.text.lower().split())
        if key in seen:
            s.dropped = True
            s.note = "duplicate of an earlier sentence"
            n += 1
        seen.add(key)
    return n


def summarize(sentences: Sequence[Sentence]) -> dict[str, Any]:
    """Counts of the verification: `citations` by outcome over every sentence checked, dropped ones
    included; `citations_kept` over the sentences survey.md prints (not the dropped or duplicate ones), whose
    removed citations are left out of the printed text."""
    counts = Counter(c.status for s in sentences for c in s.citations)
    kept = Counter(c.status for s in sentences if not s.dropped for c in s.citations)
    return {
        "citations": dict(sorted(counts.items())),
        "citations_kept": dict(sorted(kept.items())),
        "sentences": len(sentences),
        "sentences_dropped": sum(s.dropped for s in sentences),
        "sentences_duplicate": sum(s.note.startswith("duplicate") for s in sentences),
        "sentences_rewritten": sum(s.original is not None for s in sentences),
        "checks": sum(len(s.rounds) for s in sentences),
        "rounds_used": dict(sorted(Counter(max((r.round for r in s.rounds), default=0)
                                           for s in sentences).items())),
    }
