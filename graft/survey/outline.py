"""Outlines: the sections over the reranked pool, their headings (noun phrases the section's titles
share), and the assignment of papers to sections."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from graft.survey.latex import plain_text
from graft.survey.types import Candidate
from graft.text import normalize_text


def level_one(topic: str, pool: Sequence[Candidate], backend, sections: int) -> list[tuple[str, str]]:
    """Section (heading, description) pairs for the survey; at least one."""
    out = backend.outline(topic, pool, sections)
    return out or [(topic, topic)]


def assign(papers: Sequence[Candidate], descriptions: Sequence[str], encode, paper_vectors: np.ndarray,
           row_of: dict[str, int], per_part: int, taken: set[str] = frozenset()) -> list[list[Candidate]]:
    """Give each part (section) its papers: every paper goes to the description it is closest to,
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


#: Words that end a noun phrase in a title ("Networks *for* Few-Shot Learning").
_BREAK = frozenset("""
a an the and or but for with via using of on in to from by through toward towards under as at is are be without
beyond into onto over we do does can how what when where why not your our their its is it this that these those
versus vs against than all any more less very than about between among across within while after before is
make makes making learn learning based new novel improved improving efficient towards revisited simple
""".split()) - frozenset({"learning"})
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'+\-]*")
#: Words that name no theme when they stand alone as a heading ("Article", "Limitations").
GENERIC_WORDS = frozenset("""
article articles paper papers study studies work works analysis analyses approach approaches method methods
model models framework frameworks problem problems result results survey review overview application
applications evaluation experiments experiment theory perspective perspectives case data system systems
limitations limitation challenges challenge insights lessons understanding role effects effect benefits
examples example towards toward beyond revisiting rethinking investigation exploration comparison improvements performance
learning deep neural network networks algorithm algorithms task tasks text language information generation
""".split())
#: Share of a corpus's papers from which a heading of generic words only is generic (`theme_heading`).
GENERIC_SHARE = 0.10


def title_chunks(title: str, max_words: int = 4) -> list[str]:
    """The noun phrases of a title: maximal runs of words between punctuation and function words
    ("Prototypical Networks for Few-shot Learning" -> "Prototypical Networks", "Few-shot Learning"),
    at most `max_words` long; the word before an article ends no phrase ("Obfuscated Gradients Give a
    False Sense of Security" -> "Obfuscated Gradients", ...; "Studying the History of Ideas" -> "History",
    "Ideas")."""
    out: list[str] = []
    for piece in re.split(r"[:;,.?!()\[\]{}\"“”/|]|\s[-–—]\s", plain_text(title)):
        run: list[str] = []
        after = ""  # the word before the run: after "to" a run is a verb phrase ("to Generate Biographies")
        for w in piece.split():
            token = w.strip("'\"")
            if not _WORD.fullmatch(token) or token.lower() in _BREAK:
                if run and token.lower() in ("a", "an", "the"):
                    run = run[:-1]  # a run's last word before an article is a verb ("Gradients Give a ...")
                if run and after != "to":
                    out.append(" ".join(run))
                run = []
                after = token.lower()
            else:
                run.append(token)
        if run and after != "to":
            out.append(" ".join(run))
    return [c for c in out if 1 <= len(c.split()) <= max_words]


def noun_phrase(phrase: str) -> bool:
    """Whether a key phrase can be a heading: no function word inside ("ideas using topic" is a
    fragment of "Ideas Using Topic Models") and not one generic word alone."""
    ws = normalize_text(phrase).split()
    if not ws or any(w in _BREAK for w in ws):
        return False
    return not (len(ws) == 1 and ws[0] in GENERIC_WORDS)


def _case(phrase: str) -> str:
    """Sentence case that keeps acronyms and names: "Prototypical Networks" -> "Prototypical networks"."""
    ws = phrase.split()
    first = ws[0]
    if re.fullmatch(r"[A-Z][a-z]+(?:-[A-Z][a-z]+)+", first):  # "Few-Shot" -> "Few-shot"
        first = first[:1] + first[1:].lower()
    out = [first[:1].upper() + first[1:]]
    for w in ws[1:]:
        out.append(w.lower() if re.fullmatch(r"[A-Z][a-z]+(?:-[A-Za-z][a-z]*)*(?:'s)?", w) else w)
    return " ".join(out)


def phrase_heading(titles: Sequence[str], texts: Sequence[str], background: tuple[Any, int], *,
                   avoid: set[str] = frozenset(), topic: str = "", need: int | None = None) -> str | None:
    """A short noun phrase naming a group of papers: the title phrase (`title_chunks`) that the most
    of the group's titles and texts share, weighted by its rarity in the corpus (`background`: phrase
    document frequencies) and its length. None when no phrase qualifies. A heading repeats no word,
    is not the topic, and is not in `avoid` (headings used elsewhere, lower case); a one-word heading
    is in several of the titles and is not a generic word (`GENERIC_WORDS`). `need`: the titles or
    texts a phrase must occur in (default 2, 1 for a single title)."""
    bg, total = background
    total = max(total, 1)
    topic_words = set(normalize_text(topic).split())
    docs = [normalize_text(f"{t} {x}") for t, x in zip(titles, texts)]
    heads = [normalize_text(t) for t in titles]
    need = need if need is not None else 2 if len(titles) >= 2 else 1
    scored: list[tuple[float, str]] = []
    seen: set[str] = set()
    for title in titles:
        for chunk in title_chunks(title):
            key = normalize_text(chunk)
            ws = key.split()
            if not ws or key in seen or len(set(ws)) < len(ws) or key in avoid or set(ws) <= topic_words:
                continue
            if all(len(w) < 3 or w.isdigit() for w in ws) or not noun_phrase(key):
                continue
            seen.add(key)
            df = sum(f" {key} " in f" {d} " for d in docs)
            in_titles = sum(f" {key} " in f" {h} " for h in heads)
            # one word alone names a theme only when several titles carry it
            if df < need or (len(ws) == 1 and in_titles < max(need, 2)):
                continue
            idf = math.log((1 + total) / (1 + bg.get(key, 0))) + 1.0
            # a phrase several titles share names the group best; one word alone is rarely a heading
            scored.append(((df + in_titles) * idf * (0.5 if len(ws) == 1 else 1 + 0.3 * (len(ws) - 2)), chunk))
    # a phrase of two words or more, when there is one: one word alone ("Data") rarely names a theme
    longer = [x for x in scored if len(x[1].split()) > 1]
    scored = sorted(longer or scored, key=lambda x: (-x[0], x[1]))
    return _case(scored[0][1]) if scored else None


def content_words(text: str) -> list[str]:
    """The content words of a text, lower case, hyphenated words split ("Few-shot classification" ->
    ["few", "shot", "classification"]); function words, numbers and words under 3 letters left out."""
    from graft.survey.compose import STOPWORDS

    return [w for w in re.findall(r"[a-z0-9]+", plain_text(text).lower())
            if w not in STOPWORDS and w not in _BREAK and len(w) >= 3 and not w.isdigit()]


def content_stems(text: str) -> set[str]:
    """The content words of a text (`content_words`), stemmed."""
    from graft.survey.support import stem

    return {stem(w) for w in content_words(text)}


def _sub_phrases(chunk: str) -> list[str]:
    """A title phrase and the phrases its end makes, which keep its head noun ("Semi-Supervised
    Few-Shot Classification" -> itself, "Few-Shot Classification", "Classification"; never "Named
    Entity" of "Named Entity Recognition")."""
    ws = chunk.split()
    return [" ".join(ws[i:]) for i in range(len(ws))]


_VERB_AFTER = re.compile(r"\b(?:we|they|can|cannot|could|to)\s+([a-z]+)\b", re.I)
_WORDS = re.compile(r"[a-z]+", re.I)


def verbs_of(texts: Sequence[str]) -> set[str]:
    """Words the texts use mostly as verbs: at least half of their occurrences follow "we", "they",
    "to" or a modal ("we apply", "can transfer"), so that "Apply Jensen-Shannon divergence" never
    heads a section while "model" (mostly "the model", sometimes "we model") still may."""
    after: dict[str, int] = {}
    for t in texts:
        for m in _VERB_AFTER.finditer(t):
            w = m.group(1).lower()
            after[w] = after.get(w, 0) + 1
    every: dict[str, int] = dict.fromkeys(after, 0)
    for t in texts:
        for w in _WORDS.findall(t):
            w = w.lower()
            if w in every:
                every[w] += 1
    return {w for w, n in after.items() if w not in _BREAK and 2 * n >= every[w]}


def theme_heading(titles: Sequence[str], texts: Sequence[str], others: Sequence[str], *,
                  avoid: set[str] = frozenset(), topic: str = "", min_papers: int = 0,
                  corpus_share: Any = None) -> tuple[str, float] | None:
    """The heading of a section: the noun phrase of its papers' titles (or a part of one) whose
    content words occur in the most of its papers (`titles` with `texts`: title and abstract), set
    against the papers of the other sections (`others`: their titles and abstracts) as class-based
    TF-IDF does: score = share inside x log(1 + 1 / (share outside + 0.05)), longer phrases preferred.
    A heading's content words occur in at least half of the section's papers, and a phrase two thirds
    of them share is preferred to any that only half share (and then a phrase to one word); it repeats no word, is not the topic and
    not in `avoid`; it is not made of generic words only (`GENERIC_WORDS`) that `corpus_share` (a
    phrase's content stems -> the share of the corpus's papers holding them; None: not checked) finds
    in `GENERIC_SHARE` of the corpus or more ("Deep learning" in cs768: 13.5%; "Adversarial examples":
    1.4%); a single word must not be generic nor the last word of a phrase in `avoid`; its first
    word is no verb of the texts (`verbs_of`). Returns (heading, share
    inside), or None when no phrase is shared by half of the papers (`min_papers`: by that many of
    them instead)."""
    docs = [content_stems(f"{t} {x}") for t, x in zip(titles, texts)]
    rest = [content_stems(o) for o in others]
    topic_stems = content_stems(topic)
    best: tuple[tuple[int, bool], float, str, float] | None = None
    seen: set[str] = set()
    # the phrases of the titles first (a title names its paper's theme best), then the noun phrases of
    # two or three words the abstracts share (two of them at least; a run between function words, its head kept)
    candidates: list[tuple[str, float]] = [(p, 1.0) for t in titles for c in title_chunks(t) for p in _sub_phrases(c)]
    from graft.survey.compose import STOPWORDS

    counts: dict[str, int] = {}
    for x in texts:
        found = {p for c in title_chunks(x, max_words=3) for p in _sub_phrases(c) if len(p.split()) >= 2
                 and not any(w.lower() in STOPWORDS for w in p.split())}
        for p in found:
            counts[p] = counts.get(p, 0) + 1
    candidates += [(p, 0.8) for p, n in sorted(counts.items()) if n >= 2 and (n >= min_papers if min_papers else 2 * n >= len(texts))]
    verbs = verbs_of([*titles, *texts, *others])
    for phrase, weight in candidates:
        key = normalize_text(phrase)
        ws = key.split()
        if key in seen or key in avoid or len(set(ws)) < len(ws) or not noun_phrase(key) or ws[0] in verbs:
            continue
        seen.add(key)
        want = content_stems(phrase)
        if not want or want <= topic_stems or all(len(w) < 3 or w.isdigit() for w in ws):
            continue
        if len(ws) == 1 and any(a.split()[-1] == key for a in avoid):
            continue  # the head of a heading in use ("Examples" beside "Adversarial examples") names nothing new
        if corpus_share is not None and all(w in GENERIC_WORDS for w in ws) \
                and corpus_share(want) >= GENERIC_SHARE:
            continue  # generic words a corpus uses everywhere ("Deep learning" in ML) name no section's theme
        n_in = sum(want <= d for d in docs)
        inside = n_in / max(len(docs), 1)
        if (n_in < min_papers) if min_papers else (2 * inside < 1):
            continue
        outside = sum(want <= d for d in rest) / max(len(rest), 1)
        score = weight * inside * math.log(1 + 1 / (outside + 0.05)) * (
            0.6 if len(ws) == 1 else 1 + 0.15 * (len(ws) - 2))
        # a phrase two thirds of the papers share ranks above any that only half share, and within
        # that, a phrase above one word alone ("Adversarial examples", not "Bounds")
        tier = (1 if min_papers or 3 * n_in >= 2 * len(docs) else 0, len(ws) > 1)
        if best is None or (tier, score, phrase) > (best[0], best[1], best[2]):
            best = (tier, score, phrase, inside)
    return (_case(best[2]), best[3]) if best else None


def same_word(a: str, b: str) -> bool:
    """Two lower-case words of one family ("summarization", "summarize", "summaries"; "robust",
    "robustness"): the same word, a plural, or (both of at least 5 letters) a common beginning of 7
    letters or the whole shorter word."""
    if a == b or a + "s" == b or b + "s" == a:
        return True
    short, long_ = sorted((a, b), key=len)
    if len(short) < 5:
        return False
    k = min(7, len(short))
    return long_[:k] == short[:k] if len(short) >= 7 else long_.startswith(short)


def topic_words(index: Any, topic: str, max_share: float) -> dict[str, np.ndarray]:
    """The topic's content words that fewer than `max_share` of the corpus's papers use in their title
    or abstract, each with the rows of the papers that use a word of its family (`same_word`), read
    from the postings of the index's lexicon (`graft.Index.lexical_postings`); {} for an index
    without them or a topic whose words are all common."""
    if max_share <= 0:
        return {}
    lexicon, postings = index.lexicon, index.lexical_postings
    if lexicon is None or postings is None:
        return {}
    out = {}
    for word in sorted(set(content_words(topic))):
        cols = [i for i, t in enumerate(lexicon.terms) if t[:1] == word[:1] and same_word(word, t)]
        rows = np.unique(postings[cols].indices) if cols else np.zeros(0, dtype=np.int64)
        if 0 < len(rows) < max_share * index.n:
            out[word] = rows
    return out
