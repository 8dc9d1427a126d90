"""Citation verification, clause by clause.

A clause cites one paper, and the (clause, paper) pair is what is checked:

1. the clause must not name a source in its words ("Smith et al. (2099)", "arXiv:2099.99999", a
   URL, a bracketed number): a citation is made through the clause's citation only;
2. the support test (`graft.survey.support`) must find the cited paper saying it, better than the
   paper's nearest graph neighbours and the other papers of the same sentence;
3. with an LLM backend, the model is asked as well, and a "no" fails the clause.

A clause that fails is *rewritten* from the cited paper's own sentences closest to it (the LLM
first, where there is one; the paper's own sentence, restated, after that) and checked again, up to
K rounds (K = 3 in the reference method). A clause still unsupported after K rounds is *removed*.
A sentence with no clause left is dropped from survey.md, whatever happened to its clauses.
Nothing is left unverified silently: every citation ends as verified, repaired (its clause was
rewritten), removed, or — only when verification is switched off — unverified, and each round's
verdict is logged on the clause.
"""

from __future__ import annotations

import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from graft.survey.support import citation_like
from graft.survey.types import Clause, Round, Sentence

#: Citation states that count as supported in the final survey.
SUPPORTED = ("verified", "repaired")


def resolve(sentence: Sentence, corpus_ids: set[str]) -> int:
    """Remove citations that are not corpus papers (an LLM writer may invent keys); returns how many."""
    n = 0
    for c in sentence.clauses:
        if c.citation.paper_id not in corpus_ids and c.citation.status != "removed":
            c.citation.status = "removed"
            c.citation.note = "not a corpus paper"
            n += 1
    return n


class Verifier:
    """Checks and repairs clauses (see the module docstring).

    Args:
        ctx: the survey context (its `support` test and names of papers).
        backend: the writer backend (`judge`, `rewrite`).
        rounds: K, the check-and-rewrite rounds per clause.
        evidence_k: sentences of the cited paper a rewrite is given.
    """

    def __init__(self, ctx: Any, backend: Any, *, rounds: int, evidence_k: int = 3) -> None:
        self.ctx, self.backend, self.rounds, self.evidence_k = ctx, backend, rounds, evidence_k
        self.judge_name = "support test" + ("" if backend.name == "offline" else f" + {backend.name}")

    def check(self, clause: Clause, others: Sequence[str]) -> Round:
        """One check of a clause against its cited paper; `others`: the sentence's other papers."""
        pid = clause.citation.paper_id
        named = citation_like(clause.text)
        if named:
            return Round(0, pid, False, 0.0, clause.facet, self.judge_name,
                         reason=f"names a source in its text ({named!r})")
        v = self.ctx.support.check(clause.text, pid, rivals=others, ignore=self.ctx.name_words(pid))
        reason, supported = v.reason, v.supported
        if supported:
            opinion = self.backend.judge(clause.text, pid)
            if opinion is False:
                supported, reason = False, f"{self.backend.name} judged the paper does not say it"
        return Round(0, pid, supported, v.score, clause.facet, self.judge_name, reason=reason, rival=v.rival,
                     rival_score=v.rival_score)

    def evidence(self, clause: Clause) -> list[str]:
        """The cited paper's own sentences closest to the clause, best first."""
        sup = self.ctx.support
        node = self.ctx.index.row(clause.citation.paper_id)
        texts = sup.units(node)[0]
        if not texts:
            return []
        import numpy as np

        vec = np.asarray(self.ctx.encode([clause.text])[0], dtype=np.float32)
        terms = sup.clause_terms(clause.text, self.ctx.name_words(clause.citation.paper_id))
        overlap, cos = sup.unit_scores(vec, terms, node)
        w = sup.settings.overlap_weight
        order = np.argsort(-(w * overlap + (1 - w) * cos), kind="stable")
        # the title is a unit to match against but no statement to restate
        title = str(self.ctx.index.papers["title"][node] or "")
        return [texts[i] for i in order if texts[i] != " ".join(title.split())][: self.evidence_k]

    def verify_clause(self, clause: Clause, others: Sequence[str]) -> None:
        """Check, rewrite and re-check one clause in place, up to K rounds."""
        if clause.citation.status == "removed":
            return
        for r in range(1, self.rounds + 1):
            verdict = self.check(clause, others)
            verdict.round = r
            clause.rounds.append(verdict)
            if verdict.supported:
                clause.citation.status = "repaired" if clause.original is not None else "verified"
                return
            if r == self.rounds:
                break
            evidence = self.evidence(clause)
            # the LLM rewrites first; from the second rewrite on, the paper's own sentence is restated
            backend = self.backend if r == 1 else self.ctx_offline()
            draft = backend.rewrite(clause.text, clause.facet, clause.citation.paper_id, evidence)
            if draft is None or not draft.text.strip():
                verdict.action = "remove"
                break
            verdict.action = "repair"
            clause.original = clause.original or clause.text
            clause.text, clause.facet, clause.source = draft.text, draft.facet, draft.source
        clause.citation.status = "removed"
        clause.citation.note = (f"unsupported after {len(clause.rounds)} round(s): "
                                f"{clause.rounds[-1].reason if clause.rounds else 'not checked'}")
        if clause.rounds:
            clause.rounds[-1].action = "remove"

    def ctx_offline(self) -> Any:
        return getattr(self.backend, "offline", self.backend)

    def verify_sentence(self, sentence: Sentence, corpus_ids: set[str]) -> None:
        """Verify every clause of a sentence; drop the sentence when none is left."""
        resolve(sentence, corpus_ids)
        cited = [c.citation.paper_id for c in sentence.clauses if c.kept]
        for clause in sentence.clauses:
            others = [p for p in cited if p != clause.citation.paper_id]
            self.verify_clause(clause, others)
        drop_if_empty(sentence)


def drop_if_empty(sentence: Sentence) -> None:
    """A sentence with no clause left is never printed (it would show an empty citation)."""
    if not sentence.kept_clauses() and not sentence.dropped:
        sentence.dropped = True
        sentence.note = "no supported clause"


def verify_all(sentences: Sequence[Sentence], verifier: Verifier, *, corpus_ids: set[str], max_concurrency: int = 1,
               progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Verify every sentence (in parallel up to `max_concurrency`) and count the outcomes."""
    lock = threading.Lock()
    # the support test embeds each paper's sentences once: all cited papers in one encoder call
    papers = [c.citation.paper_id for s in sentences for c in s.clauses if c.citation.paper_id in corpus_ids]
    verifier.ctx.support.prepare([verifier.ctx.index.row(p) for p in dict.fromkeys(papers)])

    def one(s: Sentence) -> None:
        verifier.verify_sentence(s, corpus_ids)
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
        for c in s.clauses:
            if c.citation.status == "pending":
                c.citation.status = "unverified"
                c.citation.note = "verification switched off"
        drop_if_empty(s)
    return summarize(sentences)


_WORD = re.compile(r"[a-z0-9]+")


def _content(text: str) -> set[str]:
    """A clause's content words (lower case, letters and digits; function words and one-letter
    tokens left out): what two clauses stating the same thing share whatever their wording of a
    symbol or a split word."""
    from graft.survey.compose import STOPWORDS

    return {w for w in _WORD.findall(text.lower()) if len(w) > 1 and w not in STOPWORDS}


def _repeats(words: set[str], earlier: list[set[str]]) -> bool:
    """Whether a clause's words are mostly (3/4 of the shorter) those of an earlier clause."""
    return len(words) >= 4 and any(2 * 2 * len(words & e) >= 3 * min(len(words), len(e)) for e in earlier
                                   if len(e) >= 4)


def drop_duplicates(sentences: Sequence[Sentence], names: Mapping[str, str] | None = None) -> int:
    """Drop kept sentences that repeat earlier kept ones: the same text, or every clause restating a
    clause already printed about the same paper (a repaired clause taken from the sentence another
    clause was written from, "(right fully) become ..." after "(rightfully) become ..."); `names`:
    each paper's title and short name, whose words are not what a clause states. Returns how many."""
    seen: set[str] = set()
    said: dict[str, list[set[str]]] = {}
    n = 0
    names = names or {}
    for s in sentences:
        if s.dropped:
            continue
        key = " ".join(s.text.lower().split())
        clauses = [(c.citation.paper_id, _content(c.text) - _content(names.get(c.citation.paper_id, "")))
                   for c in s.kept_clauses()]
        if key in seen or (clauses and all(_repeats(w, said.get(p, [])) for p, w in clauses)):
            s.dropped = True
            s.note = "duplicate of an earlier sentence"
            n += 1
            continue
        seen.add(key)
        for p, w in clauses:
            said.setdefault(p, []).append(w)
    return n


def summarize(sentences: Sequence[Sentence]) -> dict[str, Any]:
    """Counts of the verification: `citations` by outcome over every clause checked, dropped
    sentences included; `citations_kept` over the printed sentences; `first_check` how the (clause,
    citation) pairs fared at their first check."""
    clauses = [c for s in sentences for c in s.clauses]
    counts = Counter(c.citation.status for c in clauses)
    kept = Counter(c.citation.status for s in sentences if not s.dropped for c in s.clauses)
    first = [c.rounds[0] for c in clauses if c.rounds]
    return {
        "citations": dict(sorted(counts.items())),
        "citations_kept": dict(sorted(kept.items())),
        "clauses": len(clauses),
        "first_check_passed": sum(r.supported for r in first),
        "first_check": len(first),
        "sentences": len(sentences),
        "sentences_dropped": sum(s.dropped for s in sentences),
        "sentences_duplicate": sum(s.note.startswith("duplicate") for s in sentences),
        "clauses_repaired": sum(c.original is not None for c in clauses),
        "checks": sum(len(c.rounds) for c in clauses),
        "rounds_used": dict(sorted(Counter(len(c.rounds) for c in clauses).items())),
    }
