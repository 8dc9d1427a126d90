"""Text-overlap metrics for extracted facets: ROUGE-L and ROUGE-N F1 over `graft.text.tokens`.

ROUGE-L (Lin, 2004) scores the longest common subsequence (LCS) of candidate and reference tokens:
P = LCS / |candidate|, R = LCS / |reference|, F1 = 2PR / (P + R). Tokens are lower-cased words with
punctuation folded away (`graft.text.tokens`); there is no stemming and no stop-word removal, so
figures are a little below those of the `rouge-score` package with its Porter stemmer.
"""

from __future__ import annotations

from collections.abc import Sequence

from graft.text import tokens


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence of two token lists (O(|a|·|b|) DP, O(|b|) memory)."""
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return 0
    prev = [0] * (len(b) + 1)
    for x in a:
        cur = [0] * (len(b) + 1)
        for j, y in enumerate(b, start=1):
            cur[j] = prev[j - 1] + 1 if x == y else max(prev[j], cur[j - 1])
        prev = cur
    return prev[-1]


def rouge_l_tokens(candidate: Sequence[str], reference: Sequence[str]) -> float:
    """ROUGE-L F1 of two token lists; 0.0 when either is empty."""
    if not candidate or not reference:
        return 0.0
    lcs = lcs_length(candidate, reference)
    if lcs == 0:
        return 0.0
    p, r = lcs / len(candidate), lcs / len(reference)
    return 2 * p * r / (p + r)


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F1 between two strings, tokenised with `graft.text.tokens`."""
    return rouge_l_tokens(tokens(candidate), tokens(reference))


def joined_rouge_l(items: Sequence[str], reference: str) -> float:
    """ROUGE-L F1 of all `items` joined into one text (in their order) against `reference`."""
    return rouge_l(" ".join(items), reference)


def best_item_rouge_l(items: Sequence[str], reference: str) -> float:
    """Highest ROUGE-L F1 of any single item against `reference` (0.0 for no items)."""
    ref = tokens(reference)
    return max((rouge_l_tokens(tokens(it), ref) for it in items), default=0.0)


def _ngrams(toks: Sequence[str], n: int) -> dict[tuple[str, ...], int]:
    counts: dict[tuple[str, ...], int] = {}
    for i in range(len(toks) - n + 1):
        gram = tuple(toks[i : i + n])
        counts[gram] = counts.get(gram, 0) + 1
    return counts


def rouge_n(candidate: str, reference: str, n: int = 1) -> float:
    """ROUGE-N F1 (clipped n-gram overlap) between two strings; 0.0 when either has no n-gram."""
    cand, ref = _ngrams(tokens(candidate), n), _ngrams(tokens(reference), n)
    if not cand or not ref:
        return 0.0
    overlap = sum(min(c, ref.get(g, 0)) for g, c in cand.items())
    if overlap == 0:
        return 0.0
    p, r = overlap / sum(cand.values()), overlap / sum(ref.values())
    return 2 * p * r / (p + r)
