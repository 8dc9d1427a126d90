"""Bibliographies of corpus papers: BibTeX, RIS and CSL-JSON entries from an index's metadata, and
TeX in titles converted for each format.

One writer serves every caller that writes references: `graft export --format bibtex|ris|csljson`,
the explorer's BibTeX download and the survey's references.bib (`bibtex`).

- BibTeX keeps a title's math (`$\\ell_0$`) intact and escapes the rest, so every brace it adds is
  balanced and a title with `&`, `%` or `_` prints as written. A paper without authors is a `@misc`
  with a `key` field, which BibTeX's plain style (and pybtex's) sorts and labels by; a paper with
  authors and a venue is an `@inproceedings`.
- RIS and CSL-JSON are plain text: TeX commands and math are read into Unicode (`$\\ell_p$` -> "ℓ_p")
  by pylatexenc, and a title that has neither is left exactly as it is (a bare `%` in "5% faster" is
  a percent sign, not a TeX comment).
- Each entry carries the paper's corpus id and, where known (`graft.identifiers.links`), its DOI,
  arXiv id and URL.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import polars as pl

from graft.errors import GraftError
from graft.identifiers import Links, links

if TYPE_CHECKING:
    from graft.index import Index

#: Formats `write_bibliography` writes, with their usual file suffixes.
BIB_FORMATS = {"bibtex": "bib", "ris": "ris", "csljson": "json"}

#: C0 and C1 control characters (terminal escapes, form feeds from PDF extraction): never written.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
#: TeX specials as commands; braces become \textbraceleft{} / \textbraceright{} because BibTeX counts
#: every brace, escaped or not, and one unbalanced `\{` makes the whole file unparsable.
_TEX = {"\\": r"\textbackslash{}", "{": r"\textbraceleft{}", "}": r"\textbraceright{}", "&": r"\&", "%": r"\%",
        "$": r"\$", "#": r"\#", "_": r"\_", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
#: Inline math: $...$ (not an escaped \$) or \(...\).
_MATH = re.compile(r"(?<!\\)\$(?!\$)(.+?)(?<!\\)\$|\\\((.+?)\\\)", re.S)
#: Operator names pylatexenc would drop inside math (`$\arg \max$` would read "max").
_OPERATORS = ("arg", "max", "min", "sup", "inf", "lim", "log", "exp", "det", "sin", "cos", "tan", "Pr", "deg")


def plain(text: str) -> str:
    """One line of text: control characters removed, whitespace runs folded to one space."""
    return " ".join(_CONTROL.sub(" ", str(text)).split())


def tex_escape(text: str) -> str:
    """Text as a literal BibTeX field value: every brace it adds is balanced, whatever the input."""
    return "".join(_TEX.get(ch, ch) for ch in plain(text))


def _balanced(text: str) -> bool:
    depth = 0
    for ch in re.sub(r"\\[{}]", "", text):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


_converters: dict[str, object] = {}


def _converter(math: str):
    """pylatexenc's LaTeX-to-text converter (`math`: "text" reads math into Unicode, "verbatim" keeps
    it as `$...$`), made once."""
    if math not in _converters:
        from pylatexenc.latex2text import LatexNodes2Text, MacroTextSpec, get_default_latex_context_db

        db = get_default_latex_context_db()
        db.add_context_category("graft-operators", prepend=True,
                                macros=[MacroTextSpec(name, simplify_repl=name) for name in _OPERATORS])
        _converters[math] = LatexNodes2Text(latex_context=db, math_mode=math)
    return _converters[math]


def latex_to_text(text: str, *, keep_math: bool = False) -> str:
    """A LaTeX field (a BibTeX title, a TeX-bearing corpus title) as plain text: accents and commands
    read (`Caf{\\'e}` -> "Café", `\\&` -> "&"), braces dropped, math read into Unicode or, with
    `keep_math`, kept as `$...$`. A bare `%`, `&` or `#` is taken as the character (a title's "5%" is
    not a TeX comment)."""
    text = plain(text)
    if not text:
        return ""
    guarded = re.sub(r"(?<!\\)([%&#])", r"\\\1", text)
    try:
        out = _converter("verbatim" if keep_math else "text").latex_to_text(guarded)
    except Exception:  # pylatexenc's parser errors on broken input: the text is then shown as it is
        return text
    return " ".join(out.split())


def plain_title(title: str) -> str:
    """A corpus title as plain text (RIS, CSL-JSON): TeX commands and math read into Unicode where it
    holds any (a backslash or a `$`); any other title exactly as it is."""
    title = plain(title)
    return latex_to_text(title) if ("\\" in title or "$" in title) else title


def bibtex_text(text: str) -> str:
    """A corpus text as a BibTeX field value: inline math (`$...$`, `\\(...\\)`) kept as `$...$` where
    its braces balance, TeX commands elsewhere read into Unicode, and everything else escaped
    (`tex_escape`)."""
    text = plain(text)
    out, pos = [], 0
    for m in _MATH.finditer(text):
        out.append(_bibtex_words(text[pos:m.start()]))
        math = (m.group(1) or m.group(2)).strip()
        out.append(f"${math}$" if math and _balanced(math) and "$" not in math else tex_escape(m.group(0)))
        pos = m.end()
    out.append(_bibtex_words(text[pos:]))
    return "".join(out)


def _bibtex_words(text: str) -> str:
    """Running text between math as BibTeX: TeX commands read, the rest escaped, and the spaces at
    its ends kept (they separate it from the math around it)."""
    if not text.strip():
        return text
    lead, body, trail = re.match(r"(\s*)(.*?)(\s*)$", text, re.S).groups()
    body = latex_to_text(body) if "\\" in body else body
    return lead + "".join(_TEX.get(ch, ch) for ch in body) + trail


def bib_key(paper_id: str) -> str:
    """A BibTeX key from a corpus id: letters, digits and underscores only, never starting with a digit."""
    key = re.sub(r"[^A-Za-z0-9]+", "_", paper_id).strip("_")
    return f"p{key}" if not key or not key[0].isalpha() else key


def bib_keys(paper_ids: list[str]) -> dict[str, str]:
    """`bib_key` of each id, made unique: ids that differ only in punctuation (`W96-0213`,
    `W96.0213`) would share a key, so a later one gets `_2`, `_3`, ... in the order given."""
    keys: dict[str, str] = {}
    used: set[str] = set()
    for pid in paper_ids:
        key, n = bib_key(pid), 1
        while key in used:
            n += 1
            key = f"{bib_key(pid)}_{n}"
        keys[pid] = key
        used.add(key)
    return keys


def bib_author(name: str) -> str:
    """One author for an `author = {A and B}` list: escaped, and braced whole when BibTeX would not
    read the name as one person: it holds the word "and" (two authors to BibTeX) or more than two
    commas ("Last, Jr, First" is the most a name has)."""
    text = tex_escape(name)
    odd = re.search(r"\band\b", text, flags=re.IGNORECASE) or text.count(",") > 2
    return "{" + text + "}" if odd else text


_ALTERNATIVES = re.compile(r"[A-Za-z][\w&.-]{0,15}(?:\s*/\s*[A-Za-z][\w&.-]{0,15})+")


def one_venue(text: str | None) -> str | None:
    """The venue a corpus gives a paper, or None when it names none: empty, or alternatives joined
    by "/" ("NeurIPS/ICML", cs768's label for all of its papers), which cannot be the one venue a
    paper appeared at."""
    v = plain(text or "")
    return None if not v or _ALTERNATIVES.fullmatch(v) else v


@dataclass
class BibEntry:
    """One corpus paper as a bibliography entry (texts as the corpus holds them)."""

    paper_id: str
    key: str  # BibTeX key (`bib_keys`)
    title: str
    authors: list[str] = field(default_factory=list)
    year: int | None = None
    venue: str | None = None
    abstract: str | None = None
    links: Links = field(default_factory=Links)


def entries(source: Index | pl.DataFrame, paper_ids: list[str], *, abstracts: bool = True) -> list[BibEntry]:
    """The bibliography entries of corpus papers, in the order given (each once): `source` is an
    index, or a papers table (`paper_id, title`, and any of `authors, year, venue, abstract, doi,
    url, arxiv`: an index's `papers`, a `Corpus.papers`).

    Raises:
        GraftError: an id the papers lack.
    """
    papers = source if isinstance(source, pl.DataFrame) else source.papers
    row_of = {pid: i for i, pid in enumerate(papers["paper_id"].to_list())}
    ids = list(dict.fromkeys(paper_ids))
    unknown = [p for p in ids if p not in row_of]
    if unknown:
        raise GraftError(f"{len(unknown)} paper id(s) are not in the corpus, e.g. {unknown[0]!r}")
    keys = bib_keys(ids)
    cols = set(papers.columns)
    out = []
    for pid in ids:
        row = row_of[pid]

        def get(name: str, row: int = row):
            return papers[name][row] if name in cols else None

        authors = get("authors")
        year = get("year")
        out.append(BibEntry(
            paper_id=pid, key=keys[pid], title=str(get("title") or ""),
            authors=[plain(a) for a in authors if plain(a)] if authors is not None else [],
            year=int(year) if year else None, venue=one_venue(get("venue")),
            abstract=(plain(get("abstract") or "") or None) if abstracts else None,
            links=links(pid, doi_text=get("doi"), url=get("url"), arxiv=get("arxiv"))))
    return out


def bibtex(items: list[BibEntry]) -> str:
    """BibTeX entries in the order given.

    A paper with authors, a venue and a year is an `@inproceedings` (BibTeX's `plain.bst` and
    pybtex's `plain` style need all three there); any other (a corpus without authors, such as
    cs768) is a `@misc`, whose fields are all optional, with its venue as `howpublished` and a
    `key` (its title) that an entry without authors is sorted by. Entries carry the DOI, arXiv id
    (`eprint`, `archiveprefix`), URL and corpus id (`note`) where known. Every entry formats in the
    `plain` style of BibTeX and of pybtex without a warning."""
    blocks = []
    for e in items:
        title = bibtex_text(e.title)
        fields = [("title", title)]
        if e.authors:
            fields.append(("author", " and ".join(bib_author(a) for a in e.authors)))
        else:
            fields.append(("key", tex_escape(plain_title(e.title)) or e.key))
        kind = "inproceedings" if e.authors and e.venue and e.year else "misc"
        if e.venue:
            fields.append(("booktitle" if kind == "inproceedings" else "howpublished", tex_escape(e.venue)))
        if e.year:
            fields.append(("year", str(e.year)))
        if e.links.doi:
            fields.append(("doi", tex_escape(e.links.doi)))
        if e.links.arxiv:
            fields += [("eprint", tex_escape(e.links.arxiv)), ("archiveprefix", "arXiv")]
        if e.links.url:
            fields.append(("url", _url(e.links.url)))
        fields.append(("note", f"corpus id {tex_escape(e.paper_id)}"))
        body = ",\n".join(f"  {k} = {{{v}}}" for k, v in fields)
        blocks.append(f"@{kind}{{{e.key},\n{body}\n}}")
    return "\n\n".join(blocks) + ("\n" if blocks else "")


def _url(url: str) -> str:
    """A URL as a BibTeX value: braces and backslashes percent-encoded (they would unbalance the
    field); the rest, a percent-encoding included, kept for url/hyperref to print."""
    return plain(url).replace("{", "%7B").replace("}", "%7D").replace("\\", "%5C")


def _split_name(name: str) -> tuple[str, str]:
    """(family, given) of "Given Family" or "Family, Given"."""
    if "," in name:
        family, _, given = name.partition(",")
        return family.strip(), given.strip()
    parts = name.split()
    return parts[-1], " ".join(parts[:-1])


def ris(items: list[BibEntry]) -> str:
    """RIS records (rispy): TY CONF with a venue (T2), else GEN; TI, AU, PY, AB, DO, UR, ID = the
    corpus id; the arXiv id as a note (N1). Texts are plain (`plain_title`)."""
    records = []
    for e in items:
        rec: dict[str, object] = {"type_of_reference": "CONF" if e.venue else "GEN", "id": e.paper_id,
                                  "title": plain_title(e.title)}
        if e.authors:
            rec["authors"] = [", ".join(x for x in _split_name(a) if x) for a in e.authors]
        if e.year:
            rec["year"] = str(e.year)
        if e.venue:
            rec["secondary_title"] = e.venue
        if e.abstract:
            rec["abstract"] = plain_title(e.abstract)
        if e.links.doi:
            rec["doi"] = e.links.doi
        if e.links.url:
            rec["urls"] = [e.links.url]
        notes = [f"corpus id {e.paper_id}"] + ([f"arXiv:{e.links.arxiv}"] if e.links.arxiv else [])
        rec["notes"] = notes
        records.append(rec)
    import rispy

    return rispy.dumps(records, implementation=_ris_writer())


def _ris_writer() -> type:
    """rispy's RIS writer without the "1." line it puts before each record by default (not an RIS
    tag; some readers take it for a broken record)."""
    import rispy

    class Writer(rispy.RisWriter):
        def set_header(self, count: int) -> str:
            return ""

    return Writer


def csl_items(items: list[BibEntry]) -> list[dict[str, object]]:
    """CSL-JSON items (the Citation Style Language's data schema, as Zotero and citeproc read it):
    `id` = corpus id, `type` paper-conference (a venue) or article, `title`, `author` (family/given),
    `issued` date-parts, `container-title`, `DOI`, `URL`, `abstract`; the arXiv id as `number`
    with `publisher` arXiv where there is no venue (as Zotero writes preprints), else in `note`."""
    out = []
    for e in items:
        item: dict[str, object] = {"id": e.paper_id, "type": "paper-conference" if e.venue else "article",
                                   "title": plain_title(e.title)}
        if e.authors:
            item["author"] = [{"family": f, "given": g} if g else {"literal": f}
                              for f, g in map(_split_name, e.authors)]
        if e.year:
            item["issued"] = {"date-parts": [[e.year]]}
        if e.venue:
            item["container-title"] = e.venue
        if e.abstract:
            item["abstract"] = plain_title(e.abstract)
        if e.links.doi:
            item["DOI"] = e.links.doi
        if e.links.url:
            item["URL"] = e.links.url
        if e.links.arxiv:
            if e.venue:
                item["note"] = f"arXiv:{e.links.arxiv}"
            else:
                item["number"] = f"arXiv:{e.links.arxiv}"
                item["publisher"] = "arXiv"
        out.append(item)
    return out


def render(items: list[BibEntry], fmt: str) -> str:
    """`items` in one of `BIB_FORMATS`.

    Raises:
        GraftError: an unknown format.
    """
    if fmt == "bibtex":
        return bibtex(items)
    if fmt == "ris":
        return ris(items)
    if fmt == "csljson":
        return json.dumps(csl_items(items), indent=1, ensure_ascii=False) + "\n"
    raise GraftError(f"bibliography format {fmt!r} is unknown; allowed: {', '.join(BIB_FORMATS)}")
