"""Paper text as survey prose: sentence splitting, self-contained clauses, paper names and the
third-person rendering of a paper's own statement as a clause about that paper.

The build splits abstracts with `graft.text.split_sentences` (its facet items follow from that and
stay as they are); the survey re-reads the abstract with `split_sentences` here, which also keeps
parentheses, brackets and inline math whole, so a facet item cut inside "(image [10]" is printed as
the whole sentence it came from (`full_sentence`).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from graft.errors import GraftError
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
    r"to (?:address|tackle|solve|overcome|alleviate|mitigate|fill|bridge|remedy) (?:this|these|it|them|that)|"
    r"based on (?:this|these|that)(?: (?:observation|observations|insight|insights|analysis|finding|findings))?|"
    r"motivated by (?:this|these)(?: \w+)?|inspired by (?:this|these)(?: \w+)?|"
    r"here|concretely|technically|empirically|theoretically|experimentally|besides|also|"
    r"more specifically|more precisely|in other words|as such|to this aim|but|yet|still|again|"
    r"in (?:our|their|this|the proposed) (?:approach|method|framework|setting|model|analysis|case))\s*,?\s+)+",
    re.I)
#: Nouns a demonstrative can name without anything said before it ("this paper", "this work").
_SELF_NOUNS = ("paper", "work", "study", "article", "note", "thesis", "report", "survey", "tutorial")
#: Openers that refer back to something the clause does not say (not self-contained).
_ANAPHOR = re.compile(r"^(?:this|these|those|such|it|its|they|their|them|he|she|both|the latter|the former)\b"
                      rf"(?!\s+(?:{'|'.join(_SELF_NOUNS)})\b)", re.I)


#: A citation left in an abstract's text: "[Katz, Barrett and Dill CAV17]", "(Smith et al., 2019)" —
#: a bracket holding a capitalised word and two digits, or a parenthesis holding "et al".
_TEXT_CITATION = re.compile(r"\s*\[(?=[^\]]*[A-Z][a-z])(?=[^\]]*\d\d)[^\[\]]{4,120}\]"
                            r"|\s*\((?=[^)]*\bet al\b)[^()]{4,120}\)")


#: A footnote mark PDF extraction left in the text: digits after a word's final stop or comma
#: ("the initial task.3 We"), or one digit glued to the end of a lower-case word before a stop
#: ("datasets1."); never a number of a name ("CIFAR10", "word2vec", "GPT-3", "3.5").
_FOOTNOTE = re.compile(r"(?<=[a-z][.,;:])\d{1,2}(?=\s|$)|\b([a-z]{4,})\d(?=[.,;:](?:\s|$)|$)")


#: A function word typed twice ("the the attack"); "that that" can be right and is kept.
_REPEATED_WORD = re.compile(r"\b(the|a|an|of|to|in|on|for|with|and|is|are)\s+\1\b", re.I)


def clean_clause(text: str) -> str:
    """A sentence as a stand-alone clause: whitespace folded, LaTeX kept, citations left in the
    text ("[Katz et al. CAV17]"), leading connectives ("However,", "To address this issue,") and a
    function word typed twice ("the the") removed, no final stop or colon."""
    text = " ".join(str(text).split())
    text = _TEXT_CITATION.sub("", text)
    text = _FOOTNOTE.sub(lambda m: m.group(1) or "", text)
    text = _LEAD.sub("", text, count=1)
    text = _REPEATED_WORD.sub(r"\1", text)
    text = text.rstrip(" .;:,")
    return text[:1].upper() + text[1:] if text else text


#: A reference back to something said before the clause ("overcomes this limitation", "for this
#: purpose", "the benefits of both"): the noun after "this / these / such" was not named earlier in
#: the clause.
_BACK = re.compile(r"\b(?:this|these|those|such|that)\s+(?:\w+\s+)?(limitations?|issues?|problems?|purposes?|"
                   r"phenomen(?:on|a)|gaps?|challenges?|effects?|secrets?|drawbacks?|shortcomings?|difficult(?:y|ies)|"
                   r"observations?|findings?|insights?|settings?|goals?|aims?|ends?|regards?|questions?|"
                   r"evaluation method|strateg(?:y|ies)|idea|ideas|tasks?)\b", re.I)
_BOTH = re.compile(r"\b(?:of|from|with|between)\s+both\s*$|\b(?:the former|the latter)\b", re.I)


#: "this / these / those / such" and the two words after it (the noun, or its modifier and the noun).
_DEMONSTRATIVE = re.compile(r"\b(?:this|these|those|such)\s+([\w-]+)(?:\s+([\w-]+))?", re.I)
#: Words after a demonstrative that point at nothing before it ("this paper", "such as", "such a").
_POINTS_AT_NOTHING = {*_SELF_NOUNS, "as", "that", "a", "an"}


#: A pronoun opening what a reporting verb reports ("We show that it is likely not due to ...", "we
#: find that they fail"): it names something the abstract said before; "it" before an adjective
#: and "to" / "that" is no pronoun ("we show that it is possible to ...").
_REPORTED_PRONOUN = re.compile(
    r"^\W*(?:[\w-]+\W+){0,4}?(?:that|whether|why|how)\s+(?:it|they|them)\b"
    r"(?!\s+(?:is|was|becomes|remains|would be|will be|can be|may be)\s+(?:\w+\s+)?(?:possible|impossible|"
    r"necessary|important|hard|difficult|easy|crucial|natural|common|feasible|beneficial|essential|known|"
    r"sufficient|unclear|challenging|desirable|useful|advantageous|enough)\s+(?:to|that|for)\b)", re.I)


def refers_back(text: str) -> bool:
    """Whether a clause leans on context it does not give: "This allows ...", "to address this
    limitation", "the benefits of both", "we show that it is likely not due to ...", "this
    transformation improves ...": a demonstrative whose
    noun the clause has not named before (neither of the two words after it), "this paper" and
    "such as" aside."""
    clause = clean_clause(text)
    if _ANAPHOR.match(clause) or _BOTH.search(clause) or _REPORTED_PRONOUN.match(clause):
        return True
    for m in _BACK.finditer(clause):
        noun = m.group(1).lower()
        stem = noun[:5]
        if stem not in clause[: m.start()].lower():
            return True
    for m in _DEMONSTRATIVE.finditer(clause):
        if m.group(1).lower() in _POINTS_AT_NOTHING:
            continue
        before = clause[: m.start()].lower()
        if not any(w.lower()[:5] in before for w in m.groups() if w):
            return True
    return False


def self_contained(text: str) -> bool:
    """True unless the clause refers back to what it does not say (`refers_back`: "This allows
    ...", "They show ...", "overcomes this limitation") or leaves a bracket open."""
    return not refers_back(text) and not _open_brackets(text)


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


_CALLED = re.compile(r"\b(?:call(?:ed)?|name(?:d)?|dub(?:bed)?|term(?:ed)?|coin(?:ed)?)\s+(?:it\s+)?"
                     r"[\"'`]*([A-Z][A-Za-z0-9]*[A-Z0-9][A-Za-z0-9+-]*)")
_PAREN_ACRONYM = re.compile(r"\(([A-Z][A-Za-z0-9]*[A-Z][A-Za-z0-9+-]*)\)")
_PROPOSE = re.compile(r"\b(?:propose|introduce|present|develop|design|devise|call|name|dub|term)\w*", re.I)
#: Words after the proposing verb within which a defined acronym names what the paper proposes
#: ("we propose a hierarchically structured meta-learning (HSML) algorithm"); an acronym further on
#: abbreviates a term the sentence uses ("... weights of a convolutional neural network (CNN)").
_NAME_WINDOW = 8


def initials(words_: list[str]) -> str:
    """The initial letters of words and of their hyphen parts and inner capitals, upper case:
    "hierarchically structured meta-learning" -> "HSML"."""
    out = []
    for w in words_:
        for part in re.split(r"[-/]", w):
            caps = re.findall(r"[A-Z]", part[1:])
            if part:
                out.append(part[0].upper() + "".join(caps))
    return "".join(out)


def _expands(acronym: str, before: list[str]) -> bool:
    """Whether the words before "(ACRONYM)" spell it: its capitals are a subsequence of their
    initials and its first capital is the initial of one of the last few words."""
    letters = re.sub(r"[^A-Z]", "", acronym)
    if len(letters) < 2:
        return False
    for start in range(max(0, len(before) - len(letters) - 3), len(before)):
        spelled = initials(before[start:])
        if not spelled or spelled[0] != letters[0]:
            continue
        it = iter(spelled)
        if all(ch in it for ch in letters):
            return True
    return False


def defined_name(title: str, abstract: str = "") -> str | None:
    """A short name the paper defines for itself: the part of its title before a colon when that is a
    short name ("BERT: Pre-training ..."), else the name its abstract gives what it proposes ("...
    which we call ProtoNet", "we propose a hierarchically structured meta-learning (HSML)
    algorithm"). An acronym the abstract only uses for a general term ("a convolutional neural
    network (CNN)" far from the proposing verb) is not the paper's name. None when there is none."""
    head = plain_text(title).split(":", 1)
    if len(head) == 2 and 1 <= len(head[0].split()) <= 3 and re.search(r"[A-Z]", head[0]):
        return head[0].strip()
    for s in split_sentences(plain_text(abstract))[:6]:
        m = _CALLED.search(s)
        if m:
            return m.group(1)
        for verb in _PROPOSE.finditer(s):
            after = s[verb.end():]
            for m in _PAREN_ACRONYM.finditer(after):
                before = after[: m.start()].split()
                if len(before) > _NAME_WINDOW or len(m.group(1)) > 15:
                    break
                if _expands(m.group(1), before):
                    return m.group(1)
    spelled = initials([w for w in plain_text(title).split() if w.lower() not in _TITLE_SMALL_WORDS])
    for m in _ACRONYM.finditer(plain_text(abstract)):  # "OSML ..." in *Online Structured Meta-learning*
        if len(spelled) >= 3 and re.sub(r"[^A-Z]", "", m.group(0)) == spelled:
            return m.group(0)
    return None


#: Title words an acronym of the title skips.
_TITLE_SMALL_WORDS = frozenset("a an and as at by for from in into of on or the to via with".split())
#: A word in capitals (and digits), maybe in the plural: a candidate acronym.
_ACRONYM = re.compile(r"\b[A-Z][A-Z0-9-]*[A-Z0-9]s?\b")


def paper_name(title: str, authors: list[str] | None = None, abstract: str = "") -> PaperName | None:
    """A short name for a paper: its authors ("Snell et al.", "Smith and Jones"), else the name it
    defines for itself (`defined_name`); None when there is none."""
    names = [" ".join(str(a).split()) for a in (authors or []) if str(a).strip()]
    if names:
        last = [n.split()[-1] for n in names]
        if len(last) == 1:
            return PaperName(last[0], False)
        if len(last) == 2:
            return PaperName(f"{last[0]} and {last[1]}", True)
        return PaperName(f"{last[0]} et al.", True)
    name = defined_name(title, abstract)
    # an acronym in the plural ("CNPs", "GANs"): the verb after it agrees ("CNPs note")
    return PaperName(name, bool(_ACRONYM.fullmatch(name)) and name.endswith("s")) if name else None


_IRREGULAR = {"have": "has", "are": "is", "were": "was", "do": "does", "go": "goes"}
#: Verbs that take no -s, and adverbs that may stand between "we" and its verb ("we also propose").
_MODALS = frozenset({"can", "could", "will", "would", "may", "might", "must", "should", "shall"})
_ADVERBS = frozenset({"also", "further", "then", "first", "additionally", "empirically", "theoretically",
                      "experimentally", "finally", "here", "thus", "therefore", "next", "now", "carefully", "formally",
                      "successfully", "extensively", "systematically", "rigorously", "newly", "subsequently",
                      "moreover", "instead", "not"})
#: Verbs that end in "-ly" like an adverb ("we apply", "we rely on").
_LY_VERBS = frozenset({"apply", "supply", "reply", "rely", "imply", "comply", "multiply", "fly", "ally", "underlie"})


def is_adverb(word: str) -> bool:
    """An adverb before a verb ("we also propose", "we significantly improve"): a listed one, or a
    word in "-ly" that is not a verb."""
    low = word.lower()
    return low in _ADVERBS or (len(low) > 4 and low.endswith("ly") and low.isalpha() and low not in _LY_VERBS)


def singular(verb: str) -> str:
    """The third-person singular of a present-tense verb ("propose" -> "proposes")."""
    low = verb.lower()
    if low in _IRREGULAR:
        return _IRREGULAR[low]
    if low.endswith("ed") or low in _MODALS or is_adverb(low) or not low.isalpha():
        return verb
    if re.search(r"[^aeiou]y$", low):
        return verb[:-1] + "ies"
    if re.search(r"(s|sh|ch|x|z|o)$", low):
        return verb + "es"
    return verb + "s"


#: Verbs a paper's authors coordinate with their first one ("we propose and empirically test",
#: "we extend X to Y and achieve"): after "and" they take the subject's agreement too.
_RESEARCH_VERBS = frozenset("""
propose introduce present develop design devise test evaluate show demonstrate achieve obtain find provide
prove establish derive apply use study analyze analyse compare outperform discuss observe conduct release
report train improve investigate identify conclude argue explore validate verify suggest extend describe
formulate leverage perform learn reach attain highlight offer construct build define characterize examine
""".split())
_AND_VERB = re.compile(r"(\band\s+(?:(?:also|then|further|empirically|theoretically|experimentally|finally)\s+)?)"
                       r"([a-z]+)\b")


def _agree_coordinated(rest: str) -> str:
    """The verbs coordinated with a sentence's first one by "and" agree with a singular subject."""
    def one(m: re.Match[str]) -> str:
        verb = m.group(2)
        return m.group(1) + (singular(verb) if verb in _RESEARCH_VERBS and not is_adverb(verb) else verb)

    return _AND_VERB.sub(one, rest)


def _conjugate_after(subject: str, rest: str, plural: bool) -> str:
    """`subject` + `rest` where rest opened with "we": the first verb, and the verbs coordinated with it
    ("propose and test"), agree with the subject."""
    if plural:
        return f"{subject} {rest}"
    parts = rest.split(" ", 2)
    if len(parts) >= 2 and is_adverb(parts[0]):  # "we also propose": the verb after it agrees
        return f"{subject} {parts[0]} {singular(parts[1])}" + (f" {_agree_coordinated(parts[2])}"
                                                                 if len(parts) > 2 else "")
    return f"{subject} {singular(parts[0])}" + (f" {_agree_coordinated(' '.join(parts[1:]))}"
                                                if len(parts) > 1 else "")


_WE = re.compile(r"^(?:in this (?:paper|work|study|article|note)\s*,?\s*)?we\s+", re.I)
#: A short opening phrase before "we" ("Based on X, we propose"): it can stand after the paper's name.
_LEAD_THEN_WE = re.compile(r"^([^,;:()$]{3,80}?),\s+we\s+(?=[a-z])")
_THIS = re.compile(r"^(?:this|the present|our) (?:paper|work|study|article|note)\s+", re.I)
#: A verb of saying after "we" ("demonstrate that", "also show empirically that").
_SAYS_THAT = re.compile(r"(?:\w+ly\s+|also\s+)?(?:show|demonstrate|find|observe|prove|argue|report|confirm|verify)"
                        r"\s+(?:\w+ly\s+)?that\s+", re.I)
#: A lead before "we" that points back at what the abstract said before ("spurred by that",
#: "motivated by this", "towards designing such a class").
_LEAD_BACK = re.compile(r"\b(?:this|that|these|those|it|them)\s*$|\bsuch an?\s+\w+", re.I)
_LATER_WE = ((re.compile(r"\bwe\b"), "they"), (re.compile(r"\bWe\b"), "They"), (re.compile(r"\bour\b"), "their"),
             (re.compile(r"\bOur\b"), "Their"), (re.compile(r"\bus\b"), "them"),
             (re.compile(r"\bourselves\b"), "themselves"))


#: With a paper's singular name as subject its possessives are the paper's ("HSML tailors its
#: knowledge"), not the authors' ("their"); "we" later in the sentence stays the authors ("they").
_SINGULAR_OUR = ((re.compile(r"\bour\b"), "its"), (re.compile(r"\bOur\b"), "Its"),
                 (re.compile(r"\bourselves\b"), "itself"))


def _third(text: str, plural: bool) -> str:
    """The authors' first person in `text` in the third person, possessives the paper's own where
    its name (singular: not `plural`) is the subject."""
    for pattern, repl in (() if plural else _SINGULAR_OUR) + _LATER_WE:
        text = pattern.sub(repl, text)
    return text


def lower_first(text: str) -> str:
    """Lower-case the first word unless it is a name or an acronym ("Transformers" stays)."""
    words = text.split(" ", 2)
    first = words[0]
    if len(words) > 1 and re.match(r"[A-Z][a-z]", words[1]) and not first.endswith(","):
        return text  # the first words of a name ("Information Extraction (IE) is ...")
    if re.fullmatch(r"[A-Z][a-z]*(?:-[a-z]+)*[,]?", first) and first.rstrip(",") not in ("I",):
        return text[:1].lower() + text[1:]
    return text


#: How a clause that is not in the author's voice is attributed, by the facet it states.
_FRAMES = {"problem": "{name} {notes} that {text}",
           "method": "in {name}, {text}",
           "result": "{name} {reports} that {text}",
           "contribution": "{name} {reports} that {text}"}


#: A statement about a field rather than about the paper's own work ("models are often susceptible").
_GENERAL_CLAIM = re.compile(r"\b(?:is|are|remains?|have been|has been)\s+(?:often|usually|typically|commonly|"
                            r"widely|generally|increasingly|well|still|notoriously|known)\b", re.I)
#: Words by which a clause speaks of the paper's own work.
_OWN_WORK = re.compile(r"\b(?:we|our|its|their|this paper|this work|proposed|propose[sd]?|present(?:s|ed)?|"
                       r"introduce[sd]?)\b", re.I)


_EXPERIMENTS = re.compile(r"^(?:(?:extensive|empirical|numerical|comprehensive|experimental|our|the|further)\s+)*"
                          r"(?:experiments|experimental results|results|evaluations?|simulations|analyses|"
                          r"ablations|studies)\b", re.I)


#: A paper stating its own goal ("The goal of this paper is to ..."), said of the paper by its name.
_GOAL = re.compile(r"^(?:the|our)\s+(?:main\s+|primary\s+|overall\s+)?(?:goal|aim|objective|purpose)\s+of\s+"
                   r"(?:this|the present|our)\s+(?:paper|work|study|article)\s+is\s+to\s+", re.I)


def as_clause(text: str, name: PaperName, facet: str) -> str:
    """A paper's own statement as a clause about that paper, in the third person with the paper's
    name as subject: "We propose X." -> "Snell et al. propose X"; "This paper studies Y" ->
    "BERT studies Y"; any other statement is attributed by its facet ("ProtoNet reports that
    ...", "In ProtoNet, ..."). No final stop; LaTeX is kept for the Markdown writer."""
    clause = clean_clause(text)
    if not clause:
        return clause
    m = _WE.match(clause)
    bare = name.text.strip("*")
    if m:
        said = _SAYS_THAT.match(clause[m.end():])
        if said and re.match(rf"{re.escape(bare)}(?![\w-])", clause[m.end() + said.end():]):
            # "We demonstrate that CNAPs achieves X" -> "CNAPs achieves X", never "CNAPs demonstrate that CNAPs"
            return _third(clause[m.end() + said.end():], name.plural)
        return _third(_conjugate_after(name.text, clause[m.end():], name.plural), name.plural)
    m = _LEAD_THEN_WE.match(clause)
    if m:  # "Based on X, we propose Y" -> "HSML, based on X, proposes Y"
        lead = lower_first(m.group(1))
        if _LEAD_BACK.search(lead) or refers_back(lead):  # "Spurred by that, we ...": the lead is left out
            return _third(_conjugate_after(name.text, clause[m.end():], name.plural), name.plural)
        return _third(_conjugate_after(f"{name.text}, {lead},", clause[m.end():], name.plural), name.plural)
    m = _GOAL.match(clause)
    if m:  # "The goal of this paper is to design X" -> "CNAPs aims to design X"
        return _third(f"{name.text} {'aim' if name.plural else 'aims'} to {clause[m.end():]}", name.plural)
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
        return _third(f"{name.text} {rest}", name.plural)
    if re.search(rf"(?<![\w-]){re.escape(bare)}(?![\w-])", clause, flags=re.I):
        # "CNPs are inspired by ...", "Inspired by X, OSML disentangles ...": the clause names the paper
        return _third(clause, name.plural)
    # "Experiments show that X": the paper's experiments, not a report about its experiments
    if _EXPERIMENTS.match(clause):
        return _third(f"in {name.text}, {lower_first(clause)}", name.plural)
    if facet in ("method", "result") and _GENERAL_CLAIM.search(clause) and not _OWN_WORK.search(clause):
        facet = "problem"  # a general statement ("models are often susceptible to ..."): what the paper notes
    frame = _FRAMES.get(facet, _FRAMES["method"])
    return _third(frame.format(name=name.text, text=lower_first(clause),
                               reports="report" if name.plural else "reports",
                               notes="note" if name.plural else "notes"), name.plural)


def sentence_case(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


_TOKEN = re.compile(r"[A-Za-z]+(?:-[A-Za-z]+)*")
_PLAIN_WORD = re.compile(r"[a-z]+")


#: A word broken at a line end and kept apart by PDF extraction ("dis- course"); the hyphen of "high-
#: and low-resource" is no break (`_AFTER_SUSPENDED_HYPHEN`).
_BROKEN_WORD = re.compile(r"\b([A-Za-z]+)- ([a-z]+)\b")
_AFTER_SUSPENDED_HYPHEN = {"and", "or", "nor", "to", "as", "versus", "vs"}


#: Endings that inflect a word ("alphabet-s", "treebank-ing").
_INFLECTIONS = ("s", "es", "ed", "d", "ing", "er", "ers", "ly")
#: First halves of closed compounds English writes as one word ("counterfactual", "hyperparameters").
_CLOSED_PREFIXES = frozenset({"counter", "under", "inter", "super", "hyper", "multi", "over", "trans", "with"})


@functools.cache
def english_words() -> frozenset[str]:
    """The packaged encoder's WordPiece vocabulary, lower case: its whole English words (~20k) and
    its word-continuation pieces (`##mark`: a half that ends real words such as "benchmark", so a
    word ending in it is no glued pair); numbers and symbols left out. Empty when the encoder
    package is missing."""
    try:
        from graft.encoder import default_model_path

        text = (Path(default_model_path()) / "vocab.txt").read_text(encoding="utf-8")
    except (GraftError, OSError):
        return frozenset()
    return frozenset(w for w in text.split()
                     if w.removeprefix("##").isalpha() and w.islower() and w.isascii() and len(w) > 1)


class Vocabulary:
    """Word and word-pair counts of a corpus's own text, to repair the words PDF extraction glued
    together ("state-ofthe-art", "onesentence", "humanengineered"): a rare word that splits into two
    words the corpus uses, as a pair ("of the") or a hyphenated compound ("human-engineered"), is
    written split; and the words it broke at a line end ("dis- course") that the corpus writes whole
    are joined.

    Args:
        texts: the corpus's titles and abstracts.
    """

    def __init__(self, texts: list[str], lexicon: frozenset[str] | None = None) -> None:
        from collections import Counter

        #: English words and word endings for one-off glued words (`english_words()` unless given)
        self.lexicon = english_words() if lexicon is None else lexicon

        words_: Counter[str] = Counter()
        pairs: Counter[tuple[str, str]] = Counter()
        joined: Counter[tuple[str, str]] = Counter()  # adjacent parts of hyphenated words ("the", "art")
        alone: Counter[str] = Counter()
        for text in texts:
            toks = _TOKEN.findall(str(text).lower())
            words_.update(toks)
            alone.update(t for t in toks if "-" not in t)
            for tok in toks:
                if "-" in tok:
                    parts = tok.split("-")
                    words_.update(parts)
                    joined.update(zip(parts, parts[1:]))
            pairs.update(zip(toks, toks[1:]))
        self.words, self.pairs, self.joined = words_, pairs, joined
        #: words the corpus writes standing alone (not as a part of a hyphenated word)
        self.alone = alone

    def split(self, word: str) -> tuple[str, str, str] | None:
        """(left, joiner, right) when `word` (lower case) is two glued words, else None."""
        n = self.words.get(word, 0)
        if len(word) < 5:
            return None
        best: tuple[int, tuple[str, str, str]] | None = None
        for i in range(2, len(word) - 1):
            a, b = word[:i], word[i:]
            ca, cb = self.words.get(a, 0), self.words.get(b, 0)
            if not ca or not cb:
                continue
            hyphen = max(self.words.get(f"{a}-{b}", 0), self.joined.get((a, b), 0))
            spaced = self.pairs.get((a, b), 0)
            evidence = hyphen + spaced  # the split as written either way ("high-quality", "high quality")
            # the split is attested as a pair or compound: more often than the glued word when that is
            # rare, five times as often when it recurs (an artefact repeated by one source); or both halves
            # are common words and the glued word a one-off
            if (evidence >= max(2, 2 * n) and (n <= 3 or evidence >= 5 * n)) or (
                    n <= 1 and min(len(a), len(b)) >= 3 and min(ca, cb) >= 30):
                score = evidence * 1000 + min(ca, cb)
                if best is None or score > best[0]:
                    best = (score, (a, "-" if hyphen and hyphen >= spaced else " ", b))
        return best[1] if best else self._lexicon_split(word, n)

    def _lexicon_split(self, word: str, n: int) -> tuple[str, str, str] | None:
        """A one-off word the corpus is too small to attest ("highquality" in a few hundred abstracts)
        split where both halves are words (the English lexicon's, or the corpus's: "keyphraseaware")
        and the lexicon does not know the glued word: a compound, joined by a hyphen ("high-quality").
        Both halves have 4 letters or more, one 5 or more ("datasets" is never "data-sets")."""
        lexicon = self.lexicon
        if n > 1 or not lexicon or word in lexicon or len(word) < 9:
            return None

        def known(half: str) -> bool:  # an English word, or one the corpus writes (alone or in a compound)
            return half in lexicon or self.words.get(half, 0) >= 2

        if any(word.endswith(end) and known(word[: -len(end)]) for end in _INFLECTIONS):
            return None  # an inflection of a known word ("alphabets", "treebanking")

        splits = [(word[:i], word[i:]) for i in range(4, len(word) - 3)]
        found = [(a, b) for a, b in splits if known(a) and known(b) and max(len(a), len(b)) >= 5
                 and f"##{b}" not in lexicon and a not in _CLOSED_PREFIXES]
        return (found[0][0], "-", found[0][1]) if len(found) == 1 else None

    def _broken_at_hyphen(self, a: str, b: str) -> bool:
        """Whether "a-b" is one word a line end broke ("perfor-mance"): neither half is a word
        (the English lexicon's, or a lower-case one the corpus writes alone twice), and the joined
        word is one. Compounds keep their hyphen ("pre-training", "co-occurrence", "k-means")."""
        lexicon = self.lexicon
        low_a, low_b = a.lower(), b.lower()
        if not (_PLAIN_WORD.fullmatch(low_a) and _PLAIN_WORD.fullmatch(low_b)) or a != low_a and a[1:] != low_a[1:]:
            return False
        if any(h in lexicon or self.alone.get(h, 0) >= 2 for h in (low_a, low_b)):
            return False
        whole = low_a + low_b
        return whole in lexicon or self.words.get(whole, 0) >= 2

    def repair(self, text: str) -> str:
        """`text` with glued words split (`split`); a part of a hyphenated word is re-joined by a
        hyphen ("state-ofthe-art" -> "state-of-the-art"); case kept."""
        def fix_part(part: str, hyphenated: bool) -> str:
            low = part.lower()
            if not _PLAIN_WORD.fullmatch(low) or (part != low and part[1:] != low[1:]):
                return part  # an acronym or a mixed-case name is never split
            got = self.split(low)
            if got is None:
                return part
            a, joiner, b = got
            out = a + ("-" if hyphenated else joiner) + b
            return out[:1].upper() + out[1:] if part[:1].isupper() else out

        def one(m: re.Match[str]) -> str:
            parts = m.group(0).split("-")
            if len(parts) == 2 and self._broken_at_hyphen(*parts):
                return parts[0] + parts[1]
            return "-".join(fix_part(p, len(parts) > 1) for p in parts)

        def rejoin(m: re.Match[str]) -> str:  # "dis- course": a word broken at a line end
            a, b = m.group(1), m.group(2)
            whole = (a + b).lower()
            if b in _AFTER_SUSPENDED_HYPHEN or self.words.get(whole, 0) < 2 \
                    or self.words.get(whole, 0) <= self.words.get(f"{a.lower()}-{b}", 0):
                return m.group(0)
            return a + b

        return _TOKEN.sub(one, _BROKEN_WORD.sub(rejoin, text))


#: A sentence that reports earlier work rather than the paper's own contribution ("Previous work
#: claims that ...", "Recent work has shown ...").
PRIOR_WORK = re.compile(
    r"(?:^|[,;]\s*)(?:(?:while|although|though|whereas|since|as|but)\s+)?(?:the\s+|these\s+)?"
    r"(?:previous|prior|earlier|existing|recent|past|current|conventional|traditional|many|most|some)\s+"
    r"(?:[\w-]+\s+){0,3}?(?:work|works|methods?|approaches|studies|research|literature|papers|models|techniques|"
    r"algorithms|solutions|systems|efforts|attempts|analyses|defenses)\b"
    r"|\bhave been (?:proposed|developed|studied|shown|introduced)\b|\bhas been (?:shown|proposed|studied)\b"
    r"|\bit (?:has been|is) (?:shown|known|well known|widely believed)\b"
    r"|\b(?:previous|prior|recent|existing) (?:work|works|studies|research) (?:has|have|claims?|shows?|showed)\b", re.I)
