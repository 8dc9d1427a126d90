"""What a section's papers share and where they differ, computed from the index (no LLM): papers
that address the same problem with different methods (the similarity of their problem and method
facet items), papers that build on one another (citation links and years inside the section), and
results reported on the same benchmark (a benchmark both abstracts name). The writers state these
relations; they are facts of the index, not claims of the papers, and are printed with the papers'
reference numbers (`types.ref`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from graft.survey.latex import plain_text
from graft.survey.types import Relation, ref, unref

#: Statements of one kind (same problem, similar methods) a section's summary makes at most: its
#: closest groups of papers.
MAX_GROUPS = 2

#: Cosine of two papers' mean problem items above which they address the same problem.
SAME_PROBLEM = 0.6
#: In a section of 3 or more papers, how much more alike than the section's papers are on average two
#: papers' problems (methods) must be to be "the same problem" ("similar methods"): the cosine of their mean problem items after the
#: section's mean problem vector is taken from both. Without it every pair of a section on adversarial
#: robustness shared a problem (cosines 0.5-0.8), an attack and a defence included (0.60; centred
#: -0.04), while pairs a reader accepts ("Adversarially Robust Generalization Requires More Data" and
#: "Rademacher Complexity for Adversarially Robust Generalization", 0.81) stand out (centred +0.28).
SAME_PROBLEM_MARGIN = 0.05
#: Cosine of two papers' mean method items above which their methods are alike.
SIMILAR_METHOD = 0.7

#: Share of the corpus's abstracts above which a title phrase ("Adversarial Training") is a term of
#: the field rather than a paper's name ("Prototypical Networks"), for "builds on".
COMMON_NAME = 0.01

#: Words after which a capitalised name is what a paper builds on, not where it reports results.
_NOT_BENCH_BEFORE = re.compile(r"\b(?:based|built|relies|rely|relying|focus|focuses|focusing|depends|depend|"
                               r"conditioned|trained|pretrained|pre-trained|fine-tuned|finetuned|applied|"
                               r"build|builds|draw|draws|improve|improves|extend|extends)\s+(?:up)?on\s*$", re.I)
_BENCH_KEY = re.compile(r"\b(?:on|across|over|datasets?|benchmarks?|corpora|corpus)\b", re.I)
#: Words that may stand between "on" / "datasets" and the names it lists ("on the two large ...").
_LIST_WORDS = frozenset("""
the both two three four five six several many challenging standard popular benchmark benchmarks dataset datasets
and real-world large-scale including such as like e.g. i.e. public widely used common classic well-known
""".split())
#: Model families and architectures a paper trains or evaluates, which are no benchmark ("on ResNet-18").
_MODEL_FAMILY = re.compile(r"^(?:ResNet|WideResNet|WRN|VGG|ViT|DeiT|Swin|BERT|RoBERTa|GPT|LLaMA|Llama|PaLM|T5|"
                           r"MobileNet|EfficientNet|DenseNet|Inception|AlexNet|LeNet|Transformer|LSTM|GCN|GAT|LLMs?|"
                           r"CLIP|UNet|U-Net|Mistral|Vicuna|OPT)(?![a-z])")
_BENCH_AFTER = re.compile(r"^\s*(?:dataset|datasets|benchmark|benchmarks|corpus|test set|challenge|shared task)\b",
                          re.I)
#: Lower-case prefixes of benchmark variants ("mini-ImageNet", "tiered-ImageNet", "colored-MNIST"); not
#: "non-" or "meta-" ("non-IID", "meta-RL" name no dataset).
_VARIANT = r"(?:mini|tiered|tiny|multi|colou?red|split|permuted|rotated|i)-[A-Z]"
_NAME_TOKEN = re.compile(r"\b(?:" + _VARIANT + r"[A-Za-z0-9]*(?:-[A-Za-z0-9]+)*|[a-z]+[A-Z][A-Za-z0-9]*|"
                         r"[A-Z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*)\b")
#: Capitalised words that are no benchmark ("On Omniglot" yes, "on ImageNet" yes, "on BERT" no).
_NOT_BENCH = frozenset("""
we our the a an in on this that these it its they their for and or of to with by from as at is are be both
cnn cnns dnn dnns rnn rnns lstm gan gans vae vaes gpu gpus cpu sota nlp ml ai rl sgd adam bert gpt transformer
transformers english chinese german french japanese our however recent real-world synthetic long short pass
beyond optimized kullback-leibler tensorflow pytorch github python large small new standard public several
""".split())
#: Metrics a result can be measured in, as abstracts name them.
METRIC = re.compile(r"\b(?:top-[15] accuracy|accuracy|F1(?:-score)?|F-score|F-measure|BLEU|ROUGE(?:-[12LSU]+)?|METEOR|"
                    r"CIDEr|AUC|AUROC|mAP|perplexity|log-likelihood|error rate|word error rate|WER|exact match|"
                    r"precision|recall|Spearman|Pearson|FID|Inception Score|PSNR|SSIM|regret|sample complexity|"
                    r"certified radius|robust accuracy|success rate)\b")


def benchmarks(abstract: str, own_names: Sequence[str] = (), *, background: Sequence[str] = ()) -> list[str]:
    """The benchmarks and datasets an abstract names where it reports on them ("on Omniglot",
    "the Meta-Dataset benchmark", "on ImageNet-LOC and PASCAL VOC"), in order; never a name the
    papers give their own methods (`own_names`) or a model family ("on BERT"), nor one named only in
    the `background` sentences of the abstract (its problem items: `_without`)."""
    text = plain_text(_without(abstract, background))
    whole = plain_text(abstract)  # an abbreviation is defined anywhere in it, background included
    own = {n.lower() for n in own_names}
    out: list[str] = []
    for m in _NAME_TOKEN.finditer(text):
        word = m.group(0)
        low = word.lower()
        if low in _NOT_BENCH or low in own or len(word) < 3 or word.isdigit():
            continue
        if not (re.search(r"[A-Z].*[A-Z0-9]|[0-9]", word[1:]) or word[0].isupper()
                or re.match(_VARIANT, word)):
            continue
        before = text[max(0, m.start() - 80): m.start()]
        after = text[m.end(): m.end() + 30]
        # a second capitalised word glued to it is one name ("PASCAL VOC", "Penn Treebank")
        nxt = re.match(r"\s+([A-Z][A-Za-z0-9-]*\d*|[A-Z]{2,}[A-Za-z0-9-]*)\b", after)
        plain_word = re.fullmatch(r"[A-Z][a-z]+", word) is not None
        name = word + (" " + nxt.group(1) if nxt and nxt.group(1).lower() not in _NOT_BENCH
                       and (nxt.group(1).isupper() or any(ch.isdigit() for ch in nxt.group(1))
                            or (plain_word and re.fullmatch(r"[A-Z][a-z]+", nxt.group(1)) is not None)) else "")
        if _NOT_BENCH_BEFORE.search(before):
            continue
        tail = text[m.start() + len(name): m.start() + len(name) + 30]
        sentence_start = re.search(r"(?:^|[.!?]\s+)$", before) is not None
        multi_cap = (sum(ch.isupper() for ch in word) >= 2 or any(ch.isdigit() for ch in word)
                     or re.match(_VARIANT, word) is not None)  # "mini-Imagenet"
        listed = False
        keys = list(_BENCH_KEY.finditer(before))
        if keys and not re.search(r"[.!?;:]\s", before[keys[-1].end():]):
            between = before[keys[-1].end():].replace(",", " ").split()
            listed = len(between) <= 6 and all(w.lower() in _LIST_WORDS or w[:1].isupper() or w[:1].isdigit()
                                               for w in between)
        if f"({word})" in whole or _MODEL_FAMILY.match(word):
            continue  # an abbreviation the abstract defines ("named entity recognition (NER)"), a model: no benchmark
        if not multi_cap and " " not in name and re.match(r"\s+(?!(?:and|or|with|for|in|on|to|as|by|from|using|"
                                                          r"dataset|datasets|benchmark|benchmarks|corpus|compared|"
                                                          r"than|while|whereas|where|which|when|respectively|but|"
                                                          r"at|under|against|over|across|is|are|was|were)\b)[a-z]",
                                                          tail):
            continue  # a capitalised word before a lower-case noun names a kind ("Markov decision processes")
        right_after = re.search(r"\b(?:on|datasets?|benchmarks?)\s+(?:the\s+)?$", before, re.I) is not None
        if _BENCH_AFTER.match(tail):  # "the Natural Questions dataset": the capitalised words before it too
            lead = re.search(r"((?:\b[A-Z][A-Za-z0-9-]*\s+){1,2})$", before)
            if lead and not any(w.lower() in _NOT_BENCH for w in lead.group(1).split()) \
                    and not re.search(r"(?:^|[.!?]\s+)$", before[: lead.start()]):
                name = lead.group(1) + name
        if _BENCH_AFTER.match(tail) or (listed and (multi_cap or (right_after and not sentence_start))):
            if name not in out and not any(word in x.split() for x in out):
                out.append(name)
    return out


_WORDS = re.compile(r"[a-z][a-z0-9-]+")
_SUFFIX = re.compile(r"(?:ing|ed|es|s)$")


def content_words(text: str, *, stem: bool = False) -> set[str]:
    """The words of `text` that say something: not stop words, not the field's generic words ("method",
    "propose"), three letters or more; with `stem`, a plural or verb ending taken off ("trained" and
    "training" are one word)."""
    from graft.survey.compose import STOPWORDS
    from graft.survey.outline import GENERIC_WORDS

    words = {w for w in _WORDS.findall(plain_text(text).lower()) if w not in STOPWORDS and w not in GENERIC_WORDS
             and len(w) > 2}
    return {_SUFFIX.sub("", w) if len(w) > 5 else w for w in words} if stem else words


#: Content words two papers' method sentences must share, beyond their titles' words, for their
#: methods to be "similar" (`content_words`, stemmed): on the example surveys a researcher disputed
#: or found vague every similar-method statement made from the cosine alone (4 of 4), and those
#: pairs' method sentences share at most one such word.
SHARED_METHOD_WORDS = 2


def bench_key(name: str) -> str:
    """What two spellings of one benchmark share ("CIFAR-10", "CIFAR10", "cifar 10")."""
    return re.sub(r"[\s_-]+", "", name.lower())


def _without(abstract: str, sentences: Sequence[str]) -> str:
    """`abstract` less the given sentences of it (a paper's problem items: a benchmark named where the
    paper describes its problem or earlier findings, "robust overfitting can be observed on SVHN and
    CIFAR-10", is not one it reports results on); a sentence not found verbatim is left."""
    for text in sentences:
        if text and text in abstract:
            abstract = abstract.replace(text, " ")
    return abstract


def metrics(abstract: str) -> list[str]:
    """The metrics an abstract names ("accuracy", "ROUGE", "BLEU"), in order, each once."""
    out: list[str] = []
    for m in METRIC.finditer(plain_text(abstract)):
        key = m.group(0)
        if key.lower() not in {x.lower() for x in out}:
            out.append(key)
    return out


def _mean_unit(vectors: Any, rows: list[int]) -> np.ndarray | None:
    if not rows:
        return None
    v = vectors.items[rows].mean(axis=0)
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else None


def _centred(vectors: dict[str, np.ndarray | None]) -> dict[str, np.ndarray] | None:
    """Unit vectors less their mean, for 3 or more papers with a vector (None otherwise: with two,
    the two residuals are opposite whatever the papers say)."""
    have = {p: v for p, v in vectors.items() if v is not None}
    if len(have) < 3:
        return None
    centre = np.mean(list(have.values()), axis=0)
    out = {}
    for p, v in have.items():
        r = v - centre
        norm = float(np.linalg.norm(r))
        out[p] = r / norm if norm > 0 else r
    return out


def _apart(centred: dict[str, np.ndarray] | None, a: str, b: str) -> bool:
    """Whether two papers are no more alike than their section's papers are on average (`_centred`
    vectors closer than `SAME_PROBLEM_MARGIN`); False where there is nothing to compare."""
    return centred is not None and a in centred and b in centred and \
        float(centred[a] @ centred[b]) < SAME_PROBLEM_MARGIN


def builds_on_links(index: Any, paper_ids: Sequence[str]) -> list[tuple[str, str]]:
    """(later, earlier) pairs of `paper_ids` where the first cites the second and is not older
    (a paper of the same year may cite its contemporary; a citation of a newer paper is a version
    artefact, not building on it)."""
    rows = [index.row(p) for p in paper_ids]
    years = index.papers["year"].to_list()
    sub = index.citation_matrix[rows][:, rows].tocoo()
    out = []
    for i, j in zip(sub.row.tolist(), sub.col.tolist()):
        if i == j:
            continue
        yi, yj = years[rows[i]], years[rows[j]]
        if yi is not None and yj is not None and yi < yj:
            continue
        out.append((paper_ids[i], paper_ids[j]))
    return sorted(out, key=lambda x: (paper_ids.index(x[0]), paper_ids.index(x[1])))


def mention_names(title: str, abstract: str = "", name: str = "") -> list[str]:
    """How another paper's abstract would name a paper: its short name (`name`, or the one its
    abstract defines), an acronym its title opens with ("TADAM"), the noun phrase its title opens with
    ("Prototypical Networks") and that phrase's initials when they are an acronym of 3+ letters
    ("Model-Agnostic Meta-Learning" -> "MAML")."""
    from graft.survey.outline import title_chunks
    from graft.survey.prose import initials, paper_name

    out = [name] if name and not name.startswith("\\textit") and " et al." not in name else []
    own = paper_name(title, [], abstract)
    if own is not None:
        out.append(own.text)
    lead = re.match(r"([A-Z][A-Za-z0-9-]*[A-Z][A-Za-z0-9-]*)\b", title.strip())
    if lead and sum(ch.isupper() for ch in lead.group(1)) >= 3:  # "TADAM Task dependent ...": its acronym
        out.append(lead.group(1))
    chunks = title_chunks(title)  # the title's own opening phrase, not a topic phrase further on
    if chunks and len(chunks[0].split()) >= 2 and title.strip().lower().startswith(chunks[0].lower()):
        out.append(chunks[0])
        acronym = initials(chunks[0].split())
        if len(acronym) >= 3:
            out.append(acronym)
    return list(dict.fromkeys(n for n in out if n))


def names_in(text: str, names: Sequence[str]) -> bool:
    """Whether `text` names a paper by one of `names`: an acronym (upper-case letters) as a whole
    word, case kept; a phrase as whole words, any case, hyphens or spaces alike."""
    for n in names:
        if re.fullmatch(r"[A-Z][A-Za-z0-9+-]*[A-Z0-9][A-Za-z0-9+-]*", n) and " " not in n:
            if re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", text):
                return True
        else:
            words = [re.escape(w) for w in re.split(r"[\s-]+", n.lower()) if w]
            if words and re.search(r"(?<![\w-])" + r"[\s-]+".join(words) + r"(?![\w-])", text.lower()):
                return True
    return False


def section_relations(index: Any, vectors: Any, paper_ids: Sequence[str], own_names: Sequence[str] = ()) -> list[Relation]:
    """Every relation between the papers of one section (see the module docstring), in the order of
    `paper_ids`: `same_problem` and `similar_method` pairs by the cosine of their mean problem and
    method items (each also more alike than the section's papers are on average,
    `SAME_PROBLEM_MARGIN`; none for a pair where one builds on the other; with `detail` "cites", the citing
    paper first, for a pair where one cites the other), `builds_on` pairs where a paper cites an earlier one and its title or abstract names
    it (`mention_names`; `own_names`: each paper's name in the survey, in `paper_ids` order), `cites`
    for the other citations, `same_benchmark` pairs by the benchmarks both abstracts name."""
    ids = list(paper_ids)
    prob = {p: _mean_unit(vectors, vectors.facet_items(p, "problem")) for p in ids}
    meth = {p: _mean_unit(vectors, vectors.facet_items(p, "method") or vectors.facet_items(p, "contribution"))
            for p in ids}
    centred, centred_method = _centred(prob), _centred(meth)
    abstracts = index.papers["abstract"].to_list()
    titles = index.papers["title"].to_list()
    item_text = getattr(vectors, "item_text", None) or []
    bench = {p: benchmarks(str(abstracts[index.row(p)] or ""), own_names,
                           background=[item_text[i] for i in vectors.facet_items(p, "problem")] if item_text else [])
             for p in ids}
    method_words: dict[str, set[str]] = {}

    def shared_method_words(a: str, b: str) -> int:
        """Content words (stemmed) the two papers' method and contribution items share, their titles'
        words not counted; none where the item texts are unknown."""
        for p in (a, b):
            if p not in method_words and item_text:
                rows = vectors.facet_items(p, "method") + vectors.facet_items(p, "contribution")
                said = set().union(*(content_words(item_text[i], stem=True) for i in rows))
                method_words[p] = said - content_words(str(titles[index.row(p)] or ""), stem=True)
        return len(method_words.get(a, set()) & method_words.get(b, set()))
    given = dict(zip(ids, own_names))
    lowered: list[str] = []
    common: dict[str, bool] = {}

    def field_term(phrase: str) -> bool:
        """A phrase many abstracts use is the field's term ("adversarial training"), not a paper's name."""
        if phrase not in common:
            if not lowered:
                lowered.extend(str(t or "").lower() for t in abstracts)
            common[phrase] = sum(phrase.lower() in t for t in lowered) > COMMON_NAME * len(lowered)
        return common[phrase]

    out: list[Relation] = []
    linked: dict[frozenset[str], Relation] = {}
    for a, b in builds_on_links(index, ids):
        row_a, row_b = index.row(a), index.row(b)
        names = mention_names(str(titles[row_b] or ""), str(abstracts[row_b] or ""), given.get(b, ""))
        names = [n for n in names if " " not in n or not field_term(n)]
        named = names_in(f"{titles[row_a] or ''} {abstracts[row_a] or ''}", names)
        out.append(Relation("builds_on" if named else "cites", [a, b]))
        held = linked.get(frozenset((a, b)))
        if held is None or held.kind != "builds_on":  # cited both ways: building on wins
            linked[frozenset((a, b))] = out[-1]
    for i, a in enumerate(ids):
        for b in ids[i + 1:]:
            ms = float(meth[a] @ meth[b]) if meth[a] is not None and meth[b] is not None else 0.0
            ps = float(prob[a] @ prob[b]) if prob[a] is not None and prob[b] is not None else 0.0
            # no more alike than the section's papers are on average: nothing to say of the pair
            apart = _apart(centred, a, b)
            alike = ms >= SIMILAR_METHOD and not _apart(centred_method, a, b) and \
                shared_method_words(a, b) >= SHARED_METHOD_WORDS
            kind, score = ("similar_method", ms) if alike else \
                ("same_problem", ps) if ps >= SAME_PROBLEM and not apart else ("", 0.0)
            link = linked.get(frozenset((a, b)))
            # a paper that builds on another is not "the same problem with a different method" of it; one
            # that cites it (without naming it) shares the problem or method with a paper it knows
            if kind and link is None:
                out.append(Relation(kind, [a, b], score=round(score, 4)))
            elif kind and link.kind == "cites":
                out.append(Relation(kind, list(link.papers), detail="cites", score=round(score, 4)))
            theirs = {bench_key(name) for name in bench[b]}
            for name in bench[a]:
                if bench_key(name) in theirs:
                    out.append(Relation("same_benchmark", [a, b], detail=name))
    return out


def _plural(name: str) -> bool:
    """Whether a paper's name takes a plural verb: authors ("Snell et al.", "Smith and Jones"), not a
    title in italics or a system's name."""
    return not name.startswith("\\textit") and (name.endswith("et al.") or " and " in name)


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def cliques(pairs: list[tuple[str, str]], order: list[str]) -> list[list[str]]:
    """Groups of papers over `pairs` in which every two papers are paired (so a statement about the
    group holds of each pair in it), in `order`: from each paper in turn, the papers linked to every
    paper already in the group (first those whose pair with it is not yet stated), again while it has
    an unstated pair.
    A set of papers all alike is one group, not one statement per paper."""
    linked = {(a, b) for a, b in pairs} | {(b, a) for a, b in pairs}
    said: set[frozenset[str]] = set()
    out = []
    for anchor in order:
        while True:
            new = [p for p in order if (anchor, p) in linked and frozenset((anchor, p)) not in said]
            if not new:
                break
            group = [anchor]
            for p in new + [p for p in order if p not in new]:  # the anchor's unstated pairs first
                if p not in group and all((q, p) in linked for q in group):
                    group.append(p)
            out.append([p for p in order if p in group])
            said |= {frozenset((a, b)) for i, a in enumerate(group) for b in group[i + 1:]}
    return out


def _strongest(relations: list[Relation]) -> list[tuple[str, str]]:
    """The pairs of `relations` (one kind) that are either paper's strongest (highest score): in a
    section where most papers are alike, the closest pairs are said, not every pair over the bar."""
    best: dict[str, float] = {}
    for r in relations:
        for p in r.papers:
            best[p] = max(best.get(p, float("-inf")), r.score)
    return [(r.papers[0], r.papers[1]) for r in relations if any(r.score >= best[p] for p in r.papers)]


def summary(relations: Sequence[Relation], shown: Sequence[str], names: dict[str, str], theme: str,
            theme_papers: int) -> str:
    """The section's opening paragraph: what its papers share (`theme`, named by `theme_papers` of
    them), which address the same problem with different methods or similar methods (each paper with
    those it is closest to; a pair where one cites the other is said to, never "with different
    methods", and a pair where one builds on the other only that), which build on
    which (a citation that does not name the cited paper is left to the section's table unless the
    two share a problem or a method), and which report on the same benchmark. Only papers of `shown` (the papers printed) are
    named; `names` gives each its name (LaTeX allowed); papers are marked with `ref`."""
    order = list(shown)
    keep = set(order)
    rel = [r for r in relations if all(p in keep for p in r.papers)]

    def who(p: str) -> str:
        return f"{names[p]} {ref(p)}"

    out: list[str] = []
    if theme and order:
        phrase = theme[0].lower() + theme[1:] if theme[1:2].islower() else theme
        if len(order) == 1:
            out.append(f"The paper discussed here names {phrase} in its title or abstract.")
        else:
            many = (f"{theme_papers} of the {len(order)} papers" if theme_papers < len(order)
                    else "Both papers" if len(order) == 2 else f"All {len(order)} papers")
            out.append(f"{many} discussed here name {phrase} in their title or abstract.")
    # a pair where one cites the other is stated with the citation: "A and B address the same problem
    # with different methods" misreads a paper that extends the one it cites (TADAM, Prototypical Networks)
    for kind, text, star, lineage in (
            ("same_problem", "address the same problem with different methods",
             ("addresses the same problem as", "address the same problem as", ", each with a different method"),
             ("addresses the same problem as", "address the same problem as")),
            ("similar_method", "take similar approaches",
             ("takes an approach similar to those of", "take an approach similar to those of", ""),
             ("takes an approach similar to that of", "take an approach similar to that of"))):
        for r in sorted((r for r in rel if r.kind == kind and r.detail == "cites"), key=lambda r: -r.score)[:MAX_GROUPS]:
            later, earlier = r.papers
            plural = _plural(names[later])
            out.append(f"{who(later)} {lineage[1] if plural else lineage[0]} {who(earlier)}, "
                       f"which {'they cite' if plural else 'it cites'}.")
        of_kind = [r for r in rel if r.kind == kind and r.detail != "cites"]
        score = {frozenset(r.papers): r.score for r in of_kind}
        groups = cliques(_strongest(of_kind), order)
        # the closest groups only: a list of every pair over the bar reads as a list, not a finding
        strength = [min(score.get(frozenset((a, b)), 0.0) for i, a in enumerate(g) for b in g[i + 1:]) for g in groups]
        keep = sorted(sorted(range(len(groups)), key=lambda i: (-strength[i], i))[:MAX_GROUPS])
        kept = [groups[i] for i in keep]
        # two pairs with a paper in common are one statement about that paper ("A addresses the
        # same problem as B and C"), not the same sentence twice
        pairs = [g for g in kept if len(g) == 2]
        hub = next((p for p in order if sum(p in g for g in pairs) >= 2), None)
        if hub is not None:
            others = [q for q in order if any(hub in g and q in g and q != hub for g in pairs)]
            verb = star[1] if _plural(names[hub]) else star[0]
            out.append(f"{who(hub)} {verb} {_join([who(q) for q in others])}{star[2]}.")
            kept = [g for g in kept if not (len(g) == 2 and hub in g)]
        for g in kept:
            out.append(f"{_join([who(p) for p in g])} {text}.")
    chains: dict[str, list[str]] = {}
    for r in rel:  # a citation that does not name the cited paper is the table's, not a statement
        if r.kind == "builds_on":
            chains.setdefault(r.papers[0], []).append(r.papers[1])
    for later in order:
        if later in chains:
            verb = "build on" if _plural(names[later]) else "builds on"
            out.append(f"{who(later)} {verb} {_join([who(p) for p in chains[later]])}.")
    bench: dict[str, list[str]] = {}
    for r in rel:
        if r.kind == "same_benchmark":
            got = bench.setdefault(r.detail, [])
            got += [p for p in r.papers if p not in got]
    together: dict[tuple[str, ...], list[str]] = {}  # the same papers on several benchmarks: one statement
    for name, ps in bench.items():
        together.setdefault(tuple(p for p in order if p in ps), []).append(unref(name))
    for ps, names_ in together.items():
        out.append(f"{_join([who(p) for p in ps])} {'both ' if len(ps) == 2 else 'all '}report results on "
                   f"{_join(names_)}.")
    return " ".join(out)
