"""Text utilities shared by extraction, DocIDs and evaluation."""

from __future__ import annotations

import re
import unicodedata
from typing import Any

# Abbreviations after which a full stop does not end a sentence.
_ABBREV = {
    "e.g", "i.e", "et al", "etc", "vs", "fig", "figs", "eq", "eqs", "sec", "cf", "resp", "approx",
    "no", "al", "dr", "mr", "ms", "prof", "inc", "st", "vol", "ch", "tab",
}
_SENT_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")


def split_sentences(text: str) -> list[str]:
    """Split running text into sentences (rule-based, abbreviation- and decimal-aware)."""
    text = " ".join(text.split())
    if not text:
        return []
    pieces: list[str] = []
    start = 0
    for m in _SENT_END.finditer(text):
        head = text[start : m.start()].rstrip()
        last_word = re.split(r"\s", head)[-1].lower().rstrip(".!?\"')]").lstrip("\"'([")  # "(e.g." too
        if last_word in _ABBREV or re.fullmatch(r"[a-z]", last_word):
            continue
        pieces.append(text[start : m.end()].strip())
        start = m.end()
    pieces.append(text[start:].strip())
    return [p for p in pieces if p]


def paper_text(title: str | None, abstract: str | None) -> str:
    """A paper's title and abstract as one text, `"Title. Abstract"`, as its title + abstract
    embedding (`embeddings/papers.npy`, the dense baseline) reads it; one of them alone when the other
    is empty or repeats it (a topic posed as a record has the same text in both)."""
    title, abstract = " ".join(str(title or "").split()), " ".join(str(abstract or "").split())
    if not title or title == abstract:
        return abstract
    return f"{title}. {abstract}" if abstract else title


def paper_texts(papers: Any) -> list[str]:
    """`paper_text` of each row of a table with `title` and `abstract` columns (a polars DataFrame
    such as `papers.parquet`), in row order."""
    return [paper_text(t, a) for t, a in zip(papers["title"].to_list(), papers["abstract"].to_list())]


_PUNCT_FOLD = re.compile(r"[^\w\s]+", flags=re.UNICODE)


def normalize_text(text: str) -> str:
    """Lower-case, fold punctuation to spaces and collapse whitespace (used for DocIDs and titles)."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = _PUNCT_FOLD.sub(" ", text.replace("_", " "))
    return " ".join(text.split())


def normalize_title(title: str) -> str:
    """Key for matching a bibliography title to a corpus title: normalised, without spaces."""
    return normalize_text(title).replace(" ", "")


def tokens(text: str) -> list[str]:
    """Word tokens of the normalised text (for ROUGE and BM25-style comparisons)."""
    return normalize_text(text).split()
