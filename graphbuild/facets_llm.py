"""The `llm` facet extractor: one schema-validated JSON chat call per paper.

As in the reference paper, a response that does not fit the schema is discarded and counted, never
repaired: a model that wrote the wrong keys or an unparsable object gets no benefit of the doubt.
Discarded and failed papers get their facets from a fallback extractor (the heuristic one in
`graft build`), so every paper still has at least one item per facet. All responses, including
discarded ones, stay in the LLM cache, so a rerun does not ask again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import polars as pl

from graft.errors import InputValidationError
from graft.extract import FacetExtractor
from graft.facets import FACETS, FacetItems, check_facet_items
from graft.jsonio import JSONLimitError, loads
from graft.llm.client import ChatClient, ChatRequest
from graft.llm.prompt import DATA_RULE, data_block

log = logging.getLogger(__name__)

#: Most items accepted per facet (the prompt asks for 1-4; a little slack before discarding).
MAX_ITEMS = 6
#: Most words accepted per item: longer "bullets" are paragraphs, not facet items.
MAX_ITEM_WORDS = 60
#: Characters of paper text sent per request (title + abstract + start of full text), about
#: 1,500 tokens, which leaves room for the answer in a 4k-token context.
DEFAULT_MAX_INPUT_CHARS = 6000
# Full text shorter than this after the abstract is not worth its tokens.
_MIN_FULL_TEXT_CHARS = 200
# Paper ids quoted in an error message; the rest are counted.
_IDS_SHOWN = 20

SYSTEM_PROMPT = f"""You extract the research facets of a scientific paper.
The paper is given inside <data>...</data> as JSON (title, abstract, maybe the beginning of its full text).
{DATA_RULE}
Answer with one JSON object and nothing else. It must have exactly these four keys:
  "problem": the problem or research question the paper addresses;
  "method": the approach, model, data or technique it uses;
  "result": its main findings or measured outcomes;
  "contribution": what it adds to the field (new methods, resources, insights).
Each value is a list of 1 to 4 short bullet items (strings of at most 25 words each).
Use only what the text says; do not invent numbers or claims."""

INSTRUCTION = "Extract the research facets of this paper."

RESPONSE_FORMAT = {"type": "json_object"}


def build_messages(
    title: str, abstract: str, full_text: str = "", *, max_chars: int = DEFAULT_MAX_INPUT_CHARS
) -> list[dict[str, str]]:
    """The chat messages for one paper, its text cut to a character budget.

    The paper's text is data: it goes into the user message only, as JSON inside one `<data>`
    block (`graft.llm.prompt.data_block`), so text holding `</data>` or instructions cannot leave
    it. The title is always kept whole; the abstract fills the budget next, and the beginning of
    the full text (introduction first in most papers) gets whatever is left.

    Args:
        title, abstract, full_text: the paper's text (full_text may be empty).
        max_chars: budget for abstract + full text, in characters.
    Returns:
        a system and a user message.
    """
    abstract = " ".join(abstract.split())[:max_chars]
    paper = {"title": " ".join(title.split()), "abstract": abstract}
    room = max_chars - len(abstract)
    body = " ".join(full_text.split())
    if body and room >= _MIN_FULL_TEXT_CHARS:
        paper["full_text_beginning"] = body[:room]
    return [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": INSTRUCTION + "\n\n" + data_block(paper)}]


def parse_facet_response(text: str, *, where: str = "response") -> FacetItems:
    """Parse and strictly validate one model answer; nothing is repaired.

    Args:
        text: the message content returned by the model.
        where: label for error messages (e.g. the paper id).
    Returns:
        the facet items in `FACETS` order, whitespace-normalised.
    Raises:
        InputValidationError: not a JSON object, keys other than exactly the four facets, a facet
            that is not a list of 1..MAX_ITEMS non-empty strings of at most MAX_ITEM_WORDS words.
    """
    try:
        obj: Any = loads(text, where)
    except JSONLimitError:
        raise
    except ValueError as exc:
        raise InputValidationError(f"{where}: not valid JSON ({exc}): {text[:120]!r}") from exc
    if not isinstance(obj, dict):
        raise InputValidationError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if set(obj) != set(FACETS):
        raise InputValidationError(
            f"{where}: keys {sorted(obj)} but exactly {list(FACETS)} are required"
        )
    for facet in FACETS:
        items = obj[facet]
        if not isinstance(items, list) or not 1 <= len(items) <= MAX_ITEMS:
            size = len(items) if isinstance(items, list) else type(items).__name__
            raise InputValidationError(f"{where}: '{facet}' must be a list of 1..{MAX_ITEMS} items, got {size}")
        for item in items:
            if isinstance(item, str) and len(item.split()) > MAX_ITEM_WORDS:
                raise InputValidationError(
                    f"{where}: an item of '{facet}' has {len(item.split())} words (at most {MAX_ITEM_WORDS})"
                )
    try:
        return check_facet_items(obj, where=where)
    except ValueError as exc:
        raise InputValidationError(str(exc)) from exc


def _column(papers: pl.DataFrame, name: str) -> list[str]:
    if name not in papers.columns:
        return [""] * papers.height
    return ["" if v is None else str(v) for v in papers.get_column(name).to_list()]


class LLMFacetExtractor:
    """Facet extraction through an OpenAI-compatible chat model (`graft build --extractor llm`).

    Args:
        client: the chat client (give it an `LLMCache` so reruns resume).
        fallback: extractor for papers whose answer was discarded or whose request failed; without
            one, such papers make `extract` raise.
        max_input_chars: characters of abstract + full text sent per paper.
    """

    name = "llm"

    def __init__(
        self,
        client: ChatClient,
        *,
        fallback: FacetExtractor | None = None,
        max_input_chars: int = DEFAULT_MAX_INPUT_CHARS,
    ) -> None:
        self.client = client
        self.fallback = fallback
        self.max_input_chars = max_input_chars
        #: (paper_id, reason) for every discarded or failed paper, for logs and reports.
        self.issues: list[tuple[str, str]] = []
        self._counts = {"papers": 0, "llm_ok": 0, "discarded": 0, "failed": 0, "fallback": 0}

    def stats(self) -> dict[str, int]:
        """Counters over all `extract` calls plus the client's (prefixed `llm_`).

        Returns:
            papers, llm_ok (valid answers), discarded (answers failing the schema), failed
            (requests that ended in an error), fallback (papers given to the fallback), and
            llm_calls, llm_requests, llm_cache_hits, llm_retries, llm_failures.
        """
        out = dict(self._counts)
        out.update({f"llm_{k}": v for k, v in self.client.stats().items()})
        return out

    def extract(
        self, papers: pl.DataFrame, *, progress: Callable[[int], None] | None = None
    ) -> list[FacetItems]:
        """Extract facets for every row (`extract_counted` without the counters)."""
        return self.extract_counted(papers, progress=progress)[0]

    def extract_counted(
        self, papers: pl.DataFrame, *, progress: Callable[[int], None] | None = None
    ) -> tuple[list[FacetItems], list[dict[str, int]]]:
        """Extract facets for every row, with each paper's share of the counters of `stats()`
        (papers, llm_ok, discarded, failed, fallback; the client's `llm_` counters are the run's).

        Args:
            papers: corpus table with paper_id, title, abstract and optionally full_text.
            progress: called with 1 as each paper's LLM call finishes.
        Returns:
            one `FacetItems` per row, in row order, and one dict of counters per row. A paper whose
            request failed counts `failed` (its items are the fallback's, and a later build asks
            the model again).
        Raises:
            InputValidationError: a required column is missing, or some papers got no valid answer
                and no fallback was given (the message lists their ids).
        """
        missing = [c for c in ("paper_id", "title", "abstract") if c not in papers.columns]
        if missing:
            raise InputValidationError(
                f"facet extraction needs columns {missing}; got {papers.columns}"
            )
        ids = _column(papers, "paper_id")
        titles, abstracts, texts = (_column(papers, c) for c in ("title", "abstract", "full_text"))
        requests = [
            ChatRequest(build_messages(t, a, f, max_chars=self.max_input_chars), RESPONSE_FORMAT)
            for t, a, f in zip(titles, abstracts, texts, strict=True)
        ]
        answers = self.client.complete_many(requests, progress=progress)

        results: list[FacetItems | None] = []
        bad: list[int] = []
        counts = [{"papers": 1, "llm_ok": 0, "discarded": 0, "failed": 0, "fallback": 0} for _ in answers]
        for i, answer in enumerate(answers):
            if isinstance(answer, Exception):
                counts[i]["failed"] = 1
                self.issues.append((ids[i], f"request failed: {answer}"))
                results.append(None)
                bad.append(i)
                continue
            try:
                results.append(parse_facet_response(answer, where=f"paper {ids[i]}"))
                counts[i]["llm_ok"] = 1
            except InputValidationError as exc:
                counts[i]["discarded"] = 1
                self.issues.append((ids[i], f"discarded: {exc}"))
                log.debug("discarded LLM facets: %s", exc)
                results.append(None)
                bad.append(i)

        for mine in counts:  # counted before the fallback, which may raise
            for k, v in mine.items():
                self._counts[k] += v
        if bad:
            self._fill_from_fallback(papers, ids, bad, results)
            for i in bad:
                counts[i]["fallback"] = 1
            self._counts["fallback"] += len(bad)
        return [r for r in results if r is not None], counts

    def _fill_from_fallback(
        self, papers: pl.DataFrame, ids: list[str], bad: list[int], results: list[FacetItems | None]
    ) -> None:
        if self.fallback is None:
            shown = ", ".join(ids[i] for i in bad[:_IDS_SHOWN])
            more = f" and {len(bad) - _IDS_SHOWN} more" if len(bad) > _IDS_SHOWN else ""
            raise InputValidationError(
                f"LLM facet extraction gave no valid answer for {len(bad)} of {len(ids)} paper(s): "
                f"{shown}{more} (see the extractor's `issues`). Pass a fallback extractor (the "
                "heuristic one), or fix the server and rerun: finished answers are cached, failed "
                "requests are asked again, discarded answers are not"
            )
        log.warning(
            "LLM facets: %d of %d paper(s) discarded or failed; using the %r extractor for them",
            len(bad), len(ids), getattr(self.fallback, "name", type(self.fallback).__name__),
        )
        filled = self.fallback.extract(papers[bad])
        if len(filled) != len(bad):
            raise InputValidationError(
                f"fallback extractor returned {len(filled)} results for {len(bad)} papers"
            )
        for i, items in zip(bad, filled, strict=True):
            results[i] = check_facet_items(items, where=f"paper {ids[i]} (fallback)")
