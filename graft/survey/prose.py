"""Paper text as survey prose: sentence splitting, self-contained clauses, paper names and the
third-person rendering of a paper's own statement as a clause about that paper.

The build splits abstracts with `graft.text.split_sentences` (its facet items follow from that and
stay as they are); the survey re-reads the abstract with `split_sentences` here, which also keeps
parentheses, brackets and inline math whole, so a facet item cut inside "(image [10]" is printed as
the whole sentence it came from (`full_sentence`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from graft.survey.latex import plain_text

#: Abbreviations whose full stop does not end a sentence (lower case, without the stop).
ABBREVIATIONS = frozenset("""
e.g i.e et al etc vs cf fig figs eq eqs sec secs resp approx no nos al dr mr ms prof inc st vol ch tab
w.r.t wrt viz ca esp incl ref refs app apps def thm lem prop cor alg
""".split())
#: Longest stretch, in characters, a bracket is assumed to stay open across sentence ends (an
#: unclosed bracket in the source must not glue the rest of an abstract into one sentence).
_MAX_OPEN = 300
_END = re.compile(r"[.!?]+[\"')\]]*(?=\s+[\"'(\[$]?[A-Z0-9$\\])")
_MATH = re.compile(r"\$\$.+?\$\$|(?<!\\)\$.+?(?<!\\)\$|\\\(.+?\\\)", re.S)


def _open_brackets(text: str) -> list[int]:
    """Positions of the brackets still open at the end of `text` (math spans skipped)."""
    masked = _MATH.sub(lambda m: "x" * len(m.group(0)), text)
    stack: list[int] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    for i, ch in enumerate(masked):
        if ch in "([{":
            stack.append(i)
        elif ch in pairs and stack and masked[stack[-1]] == pairs[ch]:
            stack.pop()
    return stack


def split_sentences(text: str) -> list[str]:
    """Sentences of running text. A full stop ends a sentence only when it is followed by a space
    and a capital, digit, bracket or math, is outside parentheses, brackets and inline math, and does
    not end an abbreviation ("e.g.", "et al.", "Fig.") or an initial ("J. Smith")."""
    text = " ".join(str(text).split())
    if not text:
        return []
    math = [(m.start(), m.end()) for m in _MATH.finditer(text)]
    out: list[str] = []
    start = 0
    for m in _END.finditer(text):
        end = m.end()
        if any(a < m.start() < b for a, b in math):
            continue
        head = text[start : m.start() + 1]
        last = re.split(r"\s", head.rstrip())[-1].lower().strip("\"'([").rstrip(".!?")
        if m.group(0)[0] == "." and (last in ABBREVIATIONS or re.fullmatch(r"[a-z]", last)):
            continue
        still_open = [p for p in _open_brackets(text[start:end]) if end - (start + p) < _MAX_OPEN]
        if still_open:
            continue
        out.append(text[start:end].strip())
        start = end
    out.append(text[start:].strip())
    return [s for s in out if s]


#: Openers that tie a sentence to the one before it; they are dropped from a clause that stands alone.
_LEAD = re.compile(
    r"^(?:(?:however|moreover|furthermore|in addition|additionally|therefore|thus|hence|consequently|"
    r"then|finally|first|second|third|firstly|secondly|lastly|specifically|in particular|notably|"
    r"importantly|to this end|to that end|on the one hand|on the other hand|in contrast|by contrast|"
    r"instead|meanwhile|in practice|in summary|overall|as a result|to do so|for this purpose|"
    r"to address (?:this|these|the above) (?:issue|issues|problem|problems|challenge|challenges|"
    r"limitation|limitations|gap|question)|in (?:this|the present|our) (?:paper|work|study|article|note)|"
    r"here|concretely|technically|empirically|theoretically|experimentally|besides|also|"
    r"more specifically|more precisely|in other words|as such|to this aim|but|yet|still|again|"
    r"in (?:our|their|this|the proposed) (?:approach|method|framework|setting|model|analysis|case))\s*,?\s+)+",
    re.I)
#: Openers that refer back to something the clause does not say (not self-contained).
_ANAPHOR = re.compile(r"^(?:this|these|those|such|it|its|they|their|them|he|she|both|the latter|the former)\b"
                      r"(?!\s+(?:paper|work|study|article|note|thesis|report|survey|tutorial)\b)", re.I)


def clean_clause(text: str) -> str:
    """A sentence as a stand-alone clause: whitespace folded, LaTeX kept, leading connectives
    ("However,", "To address this issue,") removed, no final stop or colon."""
    text = " ".join(str(text).split())
    text = _LEAD.sub("", text, count=1)
    text = text.rstrip(" .;:,")
    return text[:1].upper() + text[1:] if text else text


def self_contained(text: str) -> bool:
    """True unless the clause opens by referring back ("This allows ...", "They show ...") or
    leaves a bracket open."""
    return not _ANAPHOR.match(clean_clause(text)) and not _open_brackets(text)


def words(text: str) -> int:
    return len(plain_text(text).split())


def full_sentence(item: str, sentences: list[str], max_words: int = 55) -> str:
    """The sentence of `sentences` (a paper's re-split abstract) that a facet item was cut from, when
    the item is a part of one and it is at most `max_words` long; else the item, cut before a
    bracket it leaves open."""
    key = " ".join(item.split()).rstrip(" .")
    for s in sentences:
        if key and key in s and words(s) <= max_words:
            return s
    opened = _open_brackets(key)
    if opened:
        key = key[: opened[0]].rstrip(" ,;:(")
    return key


@dataclass(frozen=True)
class PaperName:
    """How prose refers to a paper: "Snell et al." (plural verb), "BERT" (singular)."""

    text: str
    plural: bool = False


_ACRONYM = re.compile(r"\b(?:call(?:ed)?|name(?:d)?|dub(?:bed)?|term(?:ed)?|coin(?:ed)?)\s+(?:it\s+)?"
                      r"[\"'`]*([A-Z][A-Za-z0-9]*[A-Z0-9][A-Za-z0-9+-]*)")
_PAREN_ACRONYM = re.compile(r"\(([A-Z][A-Za-z0-9]*[A-Z][A-Za-z0-9+-]*)\)")
_PROPOSE = re.compile(r"\b(?:propose|introduce|present|develop|design|devise|call|name|dub|term)", re.I)


def paper_name(title: str, authors: list[str] | None = None, abstract: str = "") -> PaperName | None:
    """A short name for a paper: its authors ("Snell et al.", "Smith and Jones"), else the system
    the abstract names ("... which we call ProtoNet", "a new model (BERT)"), else the part of the
    title before a colon when it is a short name ("BERT: Pre-training ..."); None when there is none."""
    names = [" ".join(str(a).split()) for a in (authors or []) if str(a).strip()]
    if names:
        last = [n.split()[-1] for n in names]
        if len(last) == 1:
            return PaperName(last[0], False)
        if len(last) == 2:
            return PaperName(f"{last[0]} and {last[1]}", True)
        return PaperName(f"{last[0]} et al.", True)
    head = plain_text(title).split(":", 1)
    if len(head) == 2 and 1 <= len(head[0].split()) <= 3 and re.search(r"[A-Z]", head[0]):
        return PaperName(head[0].strip(), False)
    for s in split_sentences(plain_text(abstract))[:6]:
        m = _ACRONYM.search(s)
        if m:
            return PaperName(m.group(1), False)
        if _PROPOSE.search(s):
            m = _PAREN_ACRONYM.search(s)
            if m and len(m.group(1)) <= 15:
                return PaperName(m.group(1), False)
    return None


_IRREGULAR = {"have": "has", "are": "is", "were": "was", "do": "does", "go": "goes"}
#: Verbs that take no -s, and adverbs that may stand between "we" and its verb ("we also propose").
_MODALS = frozenset({"can", "could", "will", "would", "may", "might", "must", "should", "shall"})
_ADVERBS = frozenset({"also", "further", "then", "first", "additionally", "empirically", "theoretically",
                      "experimentally", "finally", "here", "thus", "therefore", "next", "now", "carefully", "formally",
                      "successfully", "extensively", "systematically", "rigorously", "newly", "subsequently",
                      "moreover", "instead", "not"})


def singular(verb: str) -> str:
    """The third-person singular of a present-tense verb ("propose" -> "proposes")."""
    low = verb.lower()
    if low in _IRREGULAR:
        return _IRREGULAR[low]
    if low.endswith("ed") or low in _MODALS or low in _ADVERBS or not low.isalpha():
        return verb
    if re.search(r"[^aeiou]y$", low):
        return verb[:-1] + "ies"
    if re.search(r"(s|sh|ch|x|z|o)$", low):
        return verb + "es"
    return verb + "s"


def _conjugate_after(subject: str, rest: str, plural: bool) -> str:
    """`subject` + `rest` where rest opened with "we": the first verb agrees with the subject."""
    if plural:
        return f"{subject} {rest}"
    parts = rest.split(" ", 2)
    if len(parts) >= 2 and parts[0].lower() in _ADVERBS:  # "we also propose": the verb after it agrees
        return f"{subject} {parts[0]} {singular(parts[1])}" + (f" {parts[2]}" if len(parts) > 2 else "")
    return f"{subject} {singular(parts[0])}" + (f" {' '.join(parts[1:])}" if len(parts) > 1 else "")


_WE = re.compile(r"^(?:in this (?:paper|work|study|article|note)\s*,?\s*)?we\s+", re.I)
_THIS = re.compile(r"^(?:this|the present|our) (?:paper|work|study|article|note)\s+", re.I)
_LATER_WE = ((re.compile(r"\bwe\b"), "they"), (re.compile(r"\bWe\b"), "They"), (re.compile(r"\bour\b"), "their"),
             (re.compile(r"\bOur\b"), "Their"), (re.compile(r"\bus\b"), "them"),
             (re.compile(r"\bourselves\b"), "themselves"))


def _third(text: str) -> str:
    for pattern, repl in _LATER_WE:
        text = pattern.sub(repl, text)
    return text


def _lower_first(text: str) -> str:
    """Lower-case the first word unless it is a name or an acronym ("Transformers" stays)."""
    first = text.split(" ", 1)[0]
    if re.fullmatch(r"[A-Z][a-z]+(?:-[a-z]+)*[,]?", first) and first.rstrip(",") not in ("I",):
        return text[:1].lower() + text[1:]
    return text


#: How a clause that is not in the author's voice is attributed, by the facet it states.
_FRAMES = {"problem": "{name} {notes} that {text}",
           "method": "in {name}, {text}",
           "result": "{name} {reports} that {text}",
           "contribution": "{name} {reports} that {text}"}


_EXPERIMENTS = re.compile(r"^(?:(?:extensive|empirical|numerical|comprehensive|experimental|our|the|further)\s+)*"
                          r"(?:experiments|experimental results|results|evaluations?|simulations|analyses|"
                          r"ablations|studies)\b", re.I)


def as_clause(text: str, name: PaperName, facet: str) -> str:
    """A paper's own statement as a clause about that paper, in the third person with the paper's
    name as subject: "We propose X." -> "Snell et al. propose X"; "This paper studies Y" ->
    "BERT studies Y"; any other statement is attributed by its facet ("ProtoNet reports that
    ...", "In ProtoNet, ..."). No final stop; LaTeX is kept for the Markdown writer."""
    clause = clean_clause(text)
    if not clause:
        return clause
    m = _WE.match(clause)
    if m:
        return _third(_conjugate_after(name.text, clause[m.end():], name.plural))
    m = _THIS.match(clause)
    if m:
        rest = clause[m.end():]
        if name.plural:  # "This paper studies" -> "Snell et al. study": undo the singular
            first, _, tail = rest.partition(" ")
            base = {"has": "have", "is": "are", "was": "were", "does": "do"}.get(first.lower())
            if base is None and first.endswith("ies"):
                base = first[:-3] + "y"
            elif base is None and re.search(r"(ss|sh|ch|x|z|o)es$", first):
                base = first[:-2]
            elif base is None and first.endswith("s") and not first.endswith("ss"):
                base = first[:-1]
            rest = f"{base or first} {tail}".strip()
        return _third(f"{name.text} {rest}")
    # "Experiments show that X": the paper's experiments, not a report about its experiments
    if _EXPERIMENTS.match(clause):
        return _third(f"in {name.text}, {_lower_first(clause)}")
    frame = _FRAMES.get(facet, _FRAMES["method"])
    return _third(frame.format(name=name.text, text=_lower_first(clause),
                               reports="report" if name.plural else "reports",
                               notes="note" if name.plural else "notes"))


def sentence_case(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text
