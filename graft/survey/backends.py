"""Survey backends behind one interface: the offline extractive writer and the LLM writer.

Every backend answers the same questions: `expand` (topic -> descriptions), `rerank`
(description, candidates -> order), `outline` (papers -> headings), `write_section` (a section's
papers -> facet-ordered sentences whose every clause cites one paper), `judge` (does a paper say
what a clause says? an LLM's opinion, None offline) and `rewrite` (a clause that failed its check
and the cited paper's own sentences -> a clause that paper supports).

Every clause, whoever wrote it, is checked by the same support test (`graft.survey.support`); an
LLM's judgement is asked in addition, never instead.

- `OfflineBackend` needs no LLM: descriptions from the pseudo-relevant papers' facet items,
  headings from the noun phrases the papers' titles share, sections composed from the papers' own
  sentences (`graft.survey.writer`), and a failed clause restated from the cited paper's sentence
  closest to it.
- `LLMBackend` asks a chat model (OpenAI-compatible HTTP through `graft.llm.ChatClient`, or a local
  transformers model through `LocalChat`), with every answer cached in `INDEX/cache/llm.sqlite`. An
  answer that fails its JSON schema is not repaired: that step falls back to the offline backend and
  the fallback is counted. A server that stops answering altogether (`LLMError.unreachable`) stops
  the survey with a `SurveyError`; a rerun asks only what is not cached.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from graft.errors import ConfigError
from graft.facets import FACETS
from graft.index import Index
from graft.llm import CACHE_RELPATH, ChatClient, LLMCache, LLMConfig, LLMError, canonical_request, request_key
from graft.llm.prompt import DATA_RULE, data_block
from graft.models import model_folder_problem
from graft.survey.compose import claim_facet, document_frequencies, heading, key_phrases, spherical_kmeans
from graft.survey.config import SurveyConfig, SurveyError
from graft.survey.latex import plain_text
from graft.survey.outline import content_stems, noun_phrase, phrase_heading, theme_heading
from graft.survey.prose import as_clause, clean_clause, self_contained
from graft.survey.retrieve import PaperVectors, papers_until
from graft.survey.support import SupportSettings, SupportTest
from graft.survey.types import Candidate, ClauseDraft, Relation, SentenceDraft
from graft.survey.writer import Composer

PARTS = ("problem", "method", "result", "gap")


@dataclass
class SurveyContext:
    """What every backend reads: the index, its paper/item vectors, the encoder and the settings."""

    index: Index
    vectors: PaperVectors
    encode: Callable[[list[str]], np.ndarray]
    config: SurveyConfig

    def vec(self, text: str) -> np.ndarray:
        return np.asarray(self.encode([text])[0], dtype=np.float32)

    @cached_property
    def allowed(self) -> np.ndarray | None:
        """Papers the survey may cite (config.until_year), None = all."""
        return papers_until(self.index, self.config.until_year)

    @cached_property
    def support(self) -> SupportTest:
        """The support test every clause is checked with (`SurveyConfig.support_*`)."""
        c = self.config
        return SupportTest(self.index, self.encode, SupportSettings(
            threshold=c.support_threshold, margin=c.support_margin, overlap_weight=c.support_overlap_weight,
            rivals=c.support_rivals))

    @cached_property
    def composer(self) -> Composer:
        """The papers' names, restored sentences and the offline section writer."""
        return Composer(self.index, self.vectors, self.encode)

    def name_words(self, paper_id: str) -> list[str]:
        """Words that name a paper in prose (its authors' surnames, its short name or the title it is
        named by): not claims."""
        composer = self.composer
        return plain_text(composer.name_of(composer.profile(paper_id)).text).split()


#: Phrase document frequencies over an index's facet items, per (index path, corpus hash): headings
#: weigh a cluster's phrases against the whole corpus, so corpus-wide words ("language") rank low.
_BACKGROUND: dict[tuple[str, str], tuple[Any, int]] = {}
_BACKGROUND_LOCK = threading.Lock()


def _per_index(cache: dict[tuple[str, str], Any], index: Index, make: Callable[[], Any]) -> Any:
    """`make()` once per (index path, corpus hash) in `cache`, whichever thread asks first."""
    key = (str(index.path), str(index.manifest.get("corpus_hash")))
    with _BACKGROUND_LOCK:
        if key not in cache:
            cache[key] = make()
        return cache[key]


def corpus_background(index: Index, texts: Sequence[str]) -> tuple[Any, int]:
    return _per_index(_BACKGROUND, index, lambda: document_frequencies(texts))


_STEMS: dict[tuple[str, str], list[set[str]]] = {}
#: Papers a corpus needs before a phrase's share of them says it is generic (`corpus_share`): in a
#: few dozen papers one topic's words fill a third of them.
SHARE_MIN_PAPERS = 1_000
#: Papers whose content stems `corpus_share` reads at most (a seeded sample of a larger corpus).
SHARE_SAMPLE = 20_000


def corpus_share(index: Index) -> Any:
    """phrase stems -> the share of the index's papers (title + abstract; a seeded sample of
    `SHARE_SAMPLE` in a larger corpus) that hold them all (`outline.theme_heading`); None for a
    corpus under `SHARE_MIN_PAPERS` papers."""
    if index.n < SHARE_MIN_PAPERS:
        return None

    def stems() -> list[set[str]]:
        rows = np.arange(index.n)
        if len(rows) > SHARE_SAMPLE:
            rows = np.sort(np.random.default_rng(0).choice(len(rows), SHARE_SAMPLE, replace=False))
        titles, abstracts = index.papers["title"].to_list(), index.papers["abstract"].to_list()
        return [content_stems(f"{titles[r] or ''} {abstracts[r] or ''}") for r in rows.tolist()]

    docs = _per_index(_STEMS, index, stems)
    return lambda want: sum(want <= d for d in docs) / max(len(docs), 1)


class OfflineBackend:
    """The extractive writer (no LLM)."""

    name = "offline"

    def __init__(self, ctx: SurveyContext) -> None:
        self.ctx = ctx
        self.stats: dict[str, int] = {}

    # ---- query expansion -------------------------------------------------------------------
    def expand(self, topic: str, n: int, pseudo: Sequence[Candidate]) -> list[str]:
        """The topic itself, then one description per facet: the topic joined with the facet item of
        the pseudo-relevant papers (the first retrieval's top 10) that is closest to the topic."""
        out = [topic]
        if n == 1 or not pseudo:
            return out
        v = self.ctx.vec(topic)
        vectors = self.ctx.vectors
        for facet in ("method", "problem", "result", "contribution"):
            rows = [i for c in pseudo[:10] for i in vectors.facet_items(c.paper_id, facet)]
            if not rows:
                continue
            best = rows[int(np.argmax(vectors.items[rows] @ v))]
            text = f"{topic}: {vectors.item_text[best]}"
            if text not in out:
                out.append(text)
            if len(out) == n:
                break
        return out

    # ---- rerank (second stage) ------------------------------------------------------------------
    def rerank(self, description: str, candidates: Sequence[Candidate]) -> list[str]:
        """The first stage's order: the offline writer's one judgement, similarity, is already one of
        its rankings (reordering the fused list by facet-item similarity lowered the share of the
        dev hold-outs' references among the first 25 from 0.186 to 0.109)."""
        return [c.paper_id for c in candidates]

    # ---- outline ---------------------------------------------------------------------------
    def outline(self, topic: str, papers: Sequence[Candidate], n: int,
                avoid: set[str] = frozenset()) -> list[tuple[str, str]]:
        """Themes of the papers: the papers clustered by their mean facet vectors, one (heading,
        description) per cluster, largest first. The heading is the noun phrase the cluster's titles
        share most (`outline.phrase_heading`), else its key phrase; the description the heading plus
        the item nearest the cluster's centre."""
        vectors = self.ctx.vectors
        index = self.ctx.index
        ids = [c.paper_id for c in papers]
        if not ids:
            return []
        x = vectors.papers[[index.row(p) for p in ids]]
        labels = spherical_kmeans(x, min(n, max(1, len(ids) // 3)), seed=self.ctx.config.seed)
        titles = index.papers["title"].to_list()
        background = corpus_background(index, vectors.item_text + titles)
        used = {a.lower() for a in avoid}
        out: list[tuple[str, str]] = []
        for j in sorted(set(labels.tolist()), key=lambda j: (-(labels == j).sum(), j)):
            members = [p for p, lab in zip(ids, labels) if lab == j]
            member_titles = [titles[index.row(p)] for p in members]
            items = [" ".join(vectors.item_text[i] for i in vectors.facet_items(p)) for p in members]
            title = phrase_heading(member_titles, items, background, avoid=used, topic=topic)
            if title is None:  # a phrase of one title (a heading from a paper of the theme), best shared
                title = phrase_heading(member_titles, items, background, avoid=used, topic=topic, need=1)
            if title is None:
                texts = [vectors.item_text[i] for p in members for f in ("problem", "method", "contribution")
                         for i in vectors.facet_items(p, f)]
                phrases = [p for p in key_phrases(texts + member_titles * 2, background, n=5,
                                                  avoid=used | set(topic.lower().split())) if noun_phrase(p)]
                title = heading(phrases[:1]) if phrases else None
            if title is None or title.lower() in used:
                continue
            used.add(title.lower())
            centre = x[labels == j].sum(axis=0)
            centre /= max(float(np.linalg.norm(centre)), 1e-12)
            rows = [i for p in members for i in vectors.facet_items(p)]
            central = vectors.item_text[rows[int(np.argmax(vectors.items[rows] @ centre))]] if rows else ""
            out.append((title, f"{title}. {central}".strip()))
        return out[:n]

    def _texts(self, paper_ids: Sequence[str]) -> tuple[list[str], list[str]]:
        index = self.ctx.index
        papers = index.papers
        return ([str(papers["title"][index.row(p)] or "") for p in paper_ids],
                [str(papers["abstract"][index.row(p)] or "") for p in paper_ids])

    def theme_section(self, topic: str, title: str, first: Sequence[Candidate], rest: Sequence[Candidate], n: int,
                      avoid: set[str], others: Sequence[str] = ()) -> tuple[str, list[Candidate], bool]:
        """A section's heading and papers, so that the heading names what at least half of them share:
        the best `n` papers (the central ones, `first`, always) when a phrase of theirs is shared by half
        of them (`outline.theme_heading`, against the rest of the pool: `others`, ids); else the phrase
        the most of all the candidates share (3 at least, else 2), with the candidates that share it (and
        the central ones); else (no shared phrase) the noun phrase
        their titles share most, or the old heading, over the best `n`. The third value says whether the
        heading is shared by half of the papers (a theme)."""
        avoid = {a.lower() for a in avoid}
        best = list(first) + list(rest)[: max(0, n - len(first))]
        rest_texts = [" ".join(x) for x in zip(*self._texts(others))] if others else []
        share = corpus_share(self.ctx.index)
        got = theme_heading(*self._texts([c.paper_id for c in best]), rest_texts, avoid=avoid, topic=topic,
                            corpus_share=share)
        if got is not None:
            return got[0], best, True
        every = list(first) + list(rest)
        titles, abstracts = self._texts([c.paper_id for c in every])
        for least in (3, 2):
            got = theme_heading(titles, abstracts, rest_texts, avoid=avoid, topic=topic, min_papers=least,
                                corpus_share=share)
            if got is None:
                continue
            want = content_stems(got[0])
            shares = [want <= content_stems(f"{t} {a}") for t, a in zip(titles, abstracts)]
            keep = {i for i in range(len(first))}
            for i in [i for i in range(len(first), len(every)) if shares[i]]:
                if len(keep) < max(n, len(first)):
                    keep.add(i)
            if 2 * sum(shares[j] for j in keep) >= len(keep):
                return got[0], [every[i] for i in sorted(keep)], True
        return self.retitle(topic, title, best, avoid), best, False

    def retitle(self, topic: str, title: str, papers: Sequence[Candidate], avoid: set[str]) -> str:
        """The noun phrase the titles of a section's papers share most (`outline.phrase_heading`), else
        (or when that is one word and the old heading a phrase) the heading it had."""
        index, vectors = self.ctx.index, self.ctx.vectors
        titles = index.papers["title"].to_list()
        background = corpus_background(index, vectors.item_text + titles)
        texts = [" ".join(vectors.item_text[i] for i in vectors.facet_items(c.paper_id)) for c in papers]
        new = phrase_heading([titles[index.row(c.paper_id)] for c in papers], texts, background,
                             avoid={a.lower() for a in avoid}, topic=topic)
        if new is None or (len(new.split()) == 1 and len(title.split()) > 1):  # a phrase names more than a word
            return title
        return new

    # ---- writing ----------------------------------------------------------------------------
    def write_section(self, topic: str, section: str, description: str, papers: Sequence[Candidate],
                      relations: Sequence[Relation] = ()) -> list[SentenceDraft]:
        """Paragraphs of related papers from the papers' own sentences (`graft.survey.writer`)."""
        return self.ctx.composer.write_section(description, papers, relations)

    # ---- verification ------------------------------------------------------------------------
    def judge(self, text: str, paper_id: str) -> bool | None:
        """No second opinion offline: the support test decides alone."""
        return None

    def rewrite(self, text: str, facet: str, paper_id: str, evidence: Sequence[str]) -> ClauseDraft | None:
        """The clause restated from the cited paper's sentence closest to it that stands alone
        (`evidence`, best first; "To better understand this phenomenon, ..." is passed over)."""
        usable = [e for e in evidence if clean_clause(e) and self_contained(e)]
        if not usable:
            return None
        prof = self.ctx.composer.profile(paper_id)
        name = self.ctx.composer.name_of(prof, 0)
        kind = claim_facet(usable[0], default=facet)
        return ClauseDraft(text=as_clause(usable[0], name, kind), paper_id=paper_id, facet=kind, source="evidence")


# ---- LLM backends ----------------------------------------------------------------------------
_SYSTEM = ("You help write a scientific literature survey from a given set of corpus papers. " + DATA_RULE
           + " Answer with one JSON object and nothing else.")


def parse_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in a model answer (code fences and chatter around it allowed).

    Raises:
        ValueError: no JSON object could be read.
    """
    text = text.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", text, flags=re.S)
    if fence:
        text = fence.group(1)
    start = text.find("{")
    if start < 0:
        raise ConfigError("no JSON object in the answer")
    obj, _ = json.JSONDecoder().raw_decode(text[start:])
    if not isinstance(obj, dict):
        raise ConfigError("the answer is not a JSON object")
    return obj


class LocalChat:
    """A local transformers chat model (any Hugging Face causal-LM folder), greedy, answers cached.

    Args:
        path: the model folder (SmolLM2-135M-Instruct by default, converted by `graft train`'s base
            model loader; any local path accepted).
        cache: the index's LLM cache.
        max_new_tokens: tokens generated per answer.
    """

    def __init__(self, path: str, cache: LLMCache | None = None, *, max_new_tokens: int = 384,
                 device: str = "cpu") -> None:
        problem = model_folder_problem(path)
        if problem:
            raise SurveyError(f"local model {path!r} {problem}; pass --model PATH of a Hugging Face "
                              "causal-LM folder (GRAFT never downloads models)")
        self.path = str(path)
        self.model_name = Path(path).name
        self.cache = cache
        self.max_new_tokens = max_new_tokens
        self.device = device
        self._lock = threading.Lock()
        self._model: Any = None
        self._tok: Any = None

    def _load(self) -> None:
        """Load the tokenizer and the model.

        Raises:
            SurveyError: the folder does not load; every later step would fail the same way, so
                the survey stops instead of writing itself offline under the model's name.
        """
        from transformers import AutoModelForCausalLM, AutoTokenizer

        try:
            self._tok = AutoTokenizer.from_pretrained(self.path)
            self._model = AutoModelForCausalLM.from_pretrained(self.path).to(self.device).eval()
        except Exception as exc:  # transformers raises OSError, ValueError, KeyError... for a bad folder
            self._tok = self._model = None
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise SurveyError(f"local model {self.path!r} does not load ({type(exc).__name__}: {first}); pass "
                              "--model PATH of a Hugging Face causal-LM folder") from exc

    def complete(self, messages: Sequence[dict[str, Any]], *, response_format: Any = None) -> str:
        canonical = canonical_request(model=f"local:{self.model_name}", messages=[dict(m) for m in messages],
                                      temperature=0.0, max_tokens=self.max_new_tokens, response_format=None)
        key = request_key(canonical)
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                return hit.text
        import torch

        with self._lock:
            if self._model is None:
                self._load()
            enc = self._tok.apply_chat_template(list(messages), add_generation_prompt=True, return_tensors="pt",
                                                return_dict=True)
            ids = enc["input_ids"].to(self.device)
            with torch.no_grad():
                out = self._model.generate(ids, attention_mask=enc["attention_mask"].to(self.device), do_sample=False,
                                           max_new_tokens=self.max_new_tokens,
                                           pad_token_id=self._tok.pad_token_id or self._tok.eos_token_id)
            text = self._tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
        if self.cache is not None:
            self.cache.put(key, model=f"local:{self.model_name}", request=canonical, text=text, meta={})
        return text


@dataclass
class LLMBackend:
    """Survey steps asked of a chat model; an unusable answer falls back to the offline backend."""

    chat: Any  # ChatClient or LocalChat: complete(messages, response_format=...) -> str
    offline: OfflineBackend
    name: str = "llm"
    stats: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self.first_error: str | None = None  # the first failed request's error, for the message that stops a survey

    def _bump(self, key: str) -> None:
        with self._lock:
            self.stats[key] = self.stats.get(key, 0) + 1

    def _ask(self, step: str, instruction: str, data: Any) -> dict[str, Any] | None:
        messages = [{"role": "system", "content": _SYSTEM},
                    {"role": "user", "content": instruction + "\n\n" + data_block(data)}]
        try:
            answer = self.chat.complete(messages, response_format={"type": "json_object"})
            obj = parse_json_object(answer)
        except LLMError as exc:
            if exc.unreachable:  # every later step would fail too: stop instead of writing it all offline
                raise SurveyError(f"the LLM server of backend {self.name} is unreachable ({exc}). The answers "
                                  "received so far are cached: the same command, once the server is up, "
                                  "asks only the rest") from exc
            self._bump(f"{step}_llm_errors")
            self.first_error = self.first_error or str(exc)
            return None
        except ValueError:
            self._bump(f"{step}_bad_json")
            return None
        self._bump(f"{step}_answers")
        return obj

    def _fallback(self, step: str) -> None:
        self._bump(f"{step}_offline_fallbacks")

    def _paper(self, c: Candidate, key: str) -> dict[str, Any]:
        """A paper as the prompts show it: key, name to use, title, year and its facet items."""
        ctx = self.offline.ctx
        f = ctx.index.paper_facets(c.paper_id)
        prof = ctx.composer.profile(c.paper_id)
        name = ctx.composer.name_of(prof, 0).text
        return {"key": key, "name": name, "title": c.title, "year": c.year, **{x: f[x][:2] for x in FACETS}}

    def expand(self, topic: str, n: int, pseudo: Sequence[Candidate]) -> list[str]:
        obj = self._ask("expand", f"Write {n - 1} short descriptions (one sentence each) of distinct aspects "
                        "of the survey topic, using the example papers for vocabulary. JSON: "
                        '{"descriptions": ["...", ...]}',
                        {"topic": topic, "example_papers": [c.title for c in pseudo[:10]]})
        descs = obj.get("descriptions") if obj else None
        if not isinstance(descs, list) or not all(isinstance(d, str) and d.strip() for d in descs):
            self._fallback("expand")
            return self.offline.expand(topic, n, pseudo)
        return [topic] + [" ".join(d.split()) for d in descs][: n - 1]

    def rerank(self, description: str, candidates: Sequence[Candidate]) -> list[str]:
        keys = {f"P{i + 1}": c.paper_id for i, c in enumerate(candidates)}
        obj = self._ask("rerank", "Order the papers by relevance to the description, most relevant first. "
                        'JSON: {"order": ["P3", "P1", ...]}',
                        {"description": description,
                         "papers": [{"key": k, "title": c.title} for k, c in zip(keys, candidates)]})
        order = obj.get("order") if obj else None
        if not isinstance(order, list):
            self._fallback("rerank")
            return self.offline.rerank(description, candidates)
        ranked = list(dict.fromkeys(keys[k] for k in order if isinstance(k, str) and k in keys))
        return ranked + [c.paper_id for c in candidates if c.paper_id not in set(ranked)]

    def outline(self, topic: str, papers: Sequence[Candidate], n: int,
                avoid: set[str] = frozenset()) -> list[tuple[str, str]]:
        obj = self._ask("outline", f"Propose {n} sections for a survey of the topic, each a theme shared by "
                        "several of these papers (use their problem and method items). Each heading is a short "
                        "noun phrase of at most five words with no repeated word; each has a one-sentence "
                        'description. JSON: {"sections": [{"title": "...", "description": "..."}]}',
                        {"topic": topic, "avoid_headings": sorted(avoid),
                         "papers": [{"title": c.title, **{f: self.offline.ctx.index.paper_facets(c.paper_id)[f][:1]
                                                          for f in ("problem", "method")}} for c in papers[:40]]})
        secs = obj.get("sections") if obj else None
        ok = isinstance(secs, list) and secs and all(
            isinstance(s, dict) and isinstance(s.get("title"), str) and s["title"].strip()
            and isinstance(s.get("description"), str) for s in secs)
        if not ok:
            self._fallback("outline")
            return self.offline.outline(topic, papers, n, avoid)
        return [(" ".join(s["title"].split()), " ".join(s["description"].split()) or s["title"])
                for s in secs][:n]

    def theme_section(self, topic: str, title: str, first: Sequence[Candidate], rest: Sequence[Candidate], n: int,
                      avoid: set[str], others: Sequence[str] = ()) -> tuple[str, list[Candidate], bool]:
        """The model's heading when its content words occur in at least half of the section's best `n`
        papers (title or abstract), with those papers; else the offline writer's heading and papers
        (`OfflineBackend.theme_section`), counted as a fallback."""
        best = list(first) + list(rest)[: max(0, n - len(first))]
        want = content_stems(title)
        titles, abstracts = self.offline._texts([c.paper_id for c in best])
        shared = sum(want <= content_stems(f"{t} {a}") for t, a in zip(titles, abstracts))
        if want and best and 2 * shared >= len(best) and title.lower() not in {a.lower() for a in avoid}:
            return title, best, True
        self._fallback("heading")
        return self.offline.theme_section(topic, title, first, rest, n, avoid, others)

    def write_section(self, topic: str, section: str, description: str, papers: Sequence[Candidate],
                      relations: Sequence[Relation] = ()) -> list[SentenceDraft]:
        """The section as the offline writer lays it out: one paragraph per group of related papers
        (`Composer.order`), each paper's problem, method and result together; the prompt carries the
        relations between the papers (`graft.survey.relate`), and a sentence the model marks as stating
        one gets the computed connective for it (the model's own words never relate papers)."""
        keys = {f"P{i + 1}": c.paper_id for i, c in enumerate(papers)}
        key_of = {v: k for k, v in keys.items()}
        composer = self.offline.ctx.composer
        groups = composer.order(papers, relations)
        obj = self._ask(
            "write",
            "Write this section of the survey from the papers' facet items, one paragraph per group of related "
            "papers given in `groups`, in that order. Inside a paragraph write each paper in one place: its "
            "problem, its method, its result, in that order. `relations` lists what the papers share and where "
            "they differ (same_problem: the same problem with different methods, or with detail cites: the same "
            "problem, the first paper citing the second; similar_method; builds_on: the "
            "first paper cites the second and names it; cites: the first cites the second; same_benchmark: both report on `detail`). A sentence "
            "that states one of them gives its kind as \"relation\" and the other paper's key as \"to\"; the "
            "connective is added for you, so the text itself names no other paper and opens with no connective. "
            "A sentence no relation stands behind has no relation. Each sentence is a list of clauses; each clause "
            "is about exactly ONE paper, states only what that paper's items say, names the paper by its name, "
            "and cites that paper's key. No other citations, author names, years or links in the text. JSON: "
            '{"paragraphs": [{"papers": ["P1", "P2"], "sentences": [{"clauses": [{"text": "...", "cite": "P1"}]}, '
            '{"relation": "builds_on", "to": "P1", "clauses": [{"text": "...", "cite": "P2"}]}]}]}',
            {"topic": topic, "section": section, "papers": [self._paper(c, k) for k, c in zip(keys, papers)],
             "groups": [[key_of[p] for p in g] for g in groups],
             "relations": [{"kind": r.kind, "papers": [key_of[p] for p in r.papers if p in key_of],
                            **({"detail": r.detail} if r.detail else {})} for r in relations]})
        paras = obj.get("paragraphs") if obj else None
        ok = isinstance(paras, list) and paras and all(
            isinstance(p, dict) and isinstance(p.get("sentences"), list)
            and all(isinstance(x, dict) and isinstance(x.get("clauses"), list) and x["clauses"]
                    and all(isinstance(c, dict) and isinstance(c.get("text"), str) and isinstance(c.get("cite"), str)
                            for c in x["clauses"]) for x in p["sentences"]) for p in paras)
        if not ok:
            self._fallback("write")
            return self.offline.write_section(topic, section, description, papers, relations)
        # a relation is held for (kind, this paper, the other); builds_on and cites only from the later paper
        held = {(r.kind, a, b): r for r in relations for a, b in ((r.papers[0], r.papers[1]), (r.papers[1], r.papers[0]))
                if r.kind not in ("builds_on", "cites") or a == r.papers[0]}
        out: list[SentenceDraft] = []
        for k, p in enumerate(paras):
            for x in p["sentences"]:
                clauses = []
                for c in x["clauses"]:
                    text = " ".join(c["text"].split()).strip().rstrip(".")
                    lead = " ".join(str(c.get("lead") or "").split())[:20] if clauses else ""
                    if not text:
                        continue
                    # a key the model invented is kept as given so verification removes it, logged
                    pid = keys.get(c["cite"].strip(), f"unknown:{c['cite']}")
                    clauses.append(ClauseDraft(text=text, paper_id=pid, facet=claim_facet(text), lead=lead,
                                               source="llm"))
                if not clauses:
                    continue
                # the connective is the computed one, and only for a relation the index holds
                kind, to = str(x.get("relation") or ""), keys.get(str(x.get("to") or "").strip())
                rel = held.get((kind, clauses[0].paper_id, to or ""))
                opener = composer.opener(kind, [to], rel.detail) if rel is not None and to else ""
                facet = clauses[0].facet
                out.append(SentenceDraft(clauses, facet if facet in PARTS else "method", opener, k,
                                         kind if opener else ""))
        return out

    def judge(self, text: str, paper_id: str) -> bool | None:
        """The model's opinion whether the paper says what the clause says (None: no usable answer)."""
        node = self.offline.ctx.index.row(paper_id)
        papers = self.offline.ctx.index.papers
        obj = self._ask("check", "Does the paper say what the claim says? JSON: {\"supported\": true or false}",
                        {"claim": text, "paper": {"title": papers["title"][node],
                                                  "abstract": (papers["abstract"][node] or "")[:1500]}})
        if obj is None or not isinstance(obj.get("supported"), bool):
            self._fallback("check")
            return None
        return obj["supported"]

    def rewrite(self, text: str, facet: str, paper_id: str, evidence: Sequence[str]) -> ClauseDraft | None:
        """The clause rewritten by the model so that the cited paper's own sentences (`evidence`) say it."""
        if not evidence:
            return None
        ctx = self.offline.ctx
        name = ctx.composer.name_of(ctx.composer.profile(paper_id), 0).text
        obj = self._ask("rewrite", "Rewrite the claim about the paper so that the paper's own sentences support "
                        "it; name the paper by its name; no citations, author names, years or links. "
                        'JSON: {"text": "..."}',
                        {"claim": text, "paper": {"name": name, "sentences": list(evidence[:3])}})
        if obj is None or not isinstance(obj.get("text"), str) or not obj["text"].strip():
            self._fallback("rewrite")
            return self.offline.rewrite(text, facet, paper_id, evidence)
        new = " ".join(obj["text"].split()).rstrip(".")
        return ClauseDraft(text=new, paper_id=paper_id, facet=claim_facet(new, facet), source="llm")


def make_backend(ctx: SurveyContext, device: str = "cpu") -> OfflineBackend | LLMBackend:
    """The backend of `ctx.config.llm`: offline, local (transformers, `config.model` = folder) or
    openai (`config.base_url`, `config.model`, key from `config.api_key_env`); LLM answers are
    cached in INDEX/cache/llm.sqlite.

    Raises:
        SurveyError: local without a model folder.
    """
    cfg = ctx.config
    offline = OfflineBackend(ctx)
    if cfg.llm == "offline":
        return offline
    cache = LLMCache(ctx.index.path / CACHE_RELPATH)
    if cfg.llm == "openai":
        client = ChatClient(LLMConfig(model=cfg.model or "", base_url=cfg.base_url or "",
                                      api_key_env=cfg.api_key_env, max_concurrency=cfg.max_concurrency,
                                      max_tokens=cfg.max_new_tokens),
                            cache=cache)
        return LLMBackend(client, offline, name=f"openai:{cfg.model}")
    if not cfg.model:
        raise SurveyError("--llm local needs a model folder (the CLI defaults to SmolLM2-135M-Instruct)")
    return LLMBackend(LocalChat(cfg.model, cache, max_new_tokens=cfg.max_new_tokens, device=device), offline,
                      name=f"local:{Path(cfg.model).name}")
