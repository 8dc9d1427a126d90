"""A researcher's library (a reference manager's export) read, matched to a corpus, and turned into
corpus records.

Formats, each read by a maintained parser: BibTeX (bibtexparser), RIS (rispy), CSL-JSON (the
Citation Style Language's JSON, as Zotero and Mendeley export it: a JSON array of items), and a plain
list of DOIs / arXiv ids (one a line). Entries are matched to corpus papers by DOI, then arXiv id
(with or without a version suffix, from `eprint`, an arxiv.org URL, arXiv's DOI 10.48550/arXiv.ID or
"arXiv:ID" in a journal or note field), then URL (the paper's page: an ACL Anthology id's page for
ACLSum's papers, `graft.identifiers.links`), then normalised title (case, accents, punctuation and TeX
folded; a title two corpus papers share matches neither). A match is a seed set for a multi-seed
query (`graft.query.Searcher.seeds`); entries outside the corpus that carry an abstract become
corpus records (`records`) for `graft build`.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from graft.bibliography import bib_key, latex_to_text, plain
from graft.errors import InputValidationError
from graft.identifiers import arxiv_id, doi, links, unversioned
from graft.text import normalize_title

#: Library formats and the file suffixes that name them.
LIBRARY_FORMATS = {"bibtex": (".bib", ".bibtex"), "ris": (".ris",), "csljson": (".json",), "ids": (".txt",)}
#: How an entry was matched, in the order tried.
MATCHED_BY = ("doi", "arxiv", "url", "title")
#: A normalised title shorter than this ("Introduction", "Reply") is too generic to match on.
MIN_TITLE_KEY = 12


@dataclass
class LibraryEntry:
    """One reference of a library, its texts as plain Unicode (math kept as `$...$`)."""

    key: str  # the citation key, RIS ID or CSL id ("" where the export has none)
    where: str  # e.g. "library.bib entry 3 (line 12)"
    title: str | None = None
    abstract: str | None = None
    authors: list[str] = field(default_factory=list)
    year: int | None = None
    venue: str | None = None
    doi: str | None = None
    arxiv: str | None = None
    url: str | None = None


@dataclass
class Library:
    """A library as read: its entries and the blocks that could not be read (with where and why)."""

    source: str
    format: str
    entries: list[LibraryEntry]
    unreadable: list[str] = field(default_factory=list)


@dataclass
class Match:
    """An entry and the corpus paper it matched (None: none), and how (`MATCHED_BY`), or why not."""

    entry: LibraryEntry
    paper_id: str | None = None
    how: str | None = None
    note: str | None = None  # why an entry did not match, where there is more to say than "not found"


@dataclass
class LibraryMatch:
    """A library matched against a corpus."""

    library: Library
    matches: list[Match]

    @property
    def paper_ids(self) -> list[str]:
        """The matched corpus papers, each once, in library order."""
        return list(dict.fromkeys(m.paper_id for m in self.matches if m.paper_id is not None))

    @property
    def unmatched(self) -> list[LibraryEntry]:
        return [m.entry for m in self.matches if m.paper_id is None]

    def counts(self) -> dict[str, int]:
        """Entries matched by each of `MATCHED_BY`, unmatched ones and unreadable blocks."""
        by = Counter(m.how for m in self.matches if m.paper_id is not None)
        return {"entries": len(self.matches), **{how: by.get(how, 0) for how in MATCHED_BY},
                "unmatched": len(self.unmatched), "unreadable": len(self.library.unreadable)}

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready report: counts, every entry with its match, the unreadable blocks."""
        return {"source": self.library.source, "format": self.library.format, "counts": self.counts(),
                "entries": [{**asdict(m.entry), "paper_id": m.paper_id, "matched_by": m.how, "note": m.note}
                            for m in self.matches],
                "unreadable": self.library.unreadable}


# --------------------------------------------------------------------------- reading


def library_format(path: Path, fmt: str | None = None) -> str:
    """The format of a library file: `fmt` when given, else the one its suffix names.

    Raises:
        InputValidationError: an unknown format or suffix.
    """
    if fmt is not None:
        if fmt not in LIBRARY_FORMATS:
            raise InputValidationError(f"library format {fmt!r} is unknown; allowed: {', '.join(LIBRARY_FORMATS)}")
        return fmt
    suffix = path.suffix.lower()
    for name, suffixes in LIBRARY_FORMATS.items():
        if suffix in suffixes:
            return name
    allowed = ", ".join(f"{s} ({name})" for name, sfx in LIBRARY_FORMATS.items() for s in sfx)
    raise InputValidationError(f"{path}: unknown library format {suffix or '(no suffix)'!r}; use {allowed}, or "
                               "name the format (--format bibtex|ris|csljson|ids)")


def read_library(path: str | Path, fmt: str | None = None) -> Library:
    """Read a library file (BibTeX, RIS, CSL-JSON or a list of ids; `fmt` None: from the suffix).

    Raises:
        InputValidationError: the file is missing or unreadable, its format unknown, or no entry in
            it could be read.
    """
    path = Path(path)
    fmt = library_format(path, fmt)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputValidationError(f"library not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputValidationError(f"{path}: cannot read the library ({exc}); it must be a UTF-8 text file") from None
    reader = {"bibtex": _read_bibtex, "ris": _read_ris, "csljson": _read_csljson, "ids": _read_ids}[fmt]
    library = reader(text, path.name)
    if not library.entries:
        why = f" ({len(library.unreadable)} unreadable: {library.unreadable[0]})" if library.unreadable else ""
        raise InputValidationError(f"{path}: no {fmt} entries in it{why}")
    return library


def _text(value: Any, *, tex: bool = False) -> str | None:
    if value is None:
        return None
    if isinstance(value, list):
        value = " ".join(str(v) for v in value)
    text = latex_to_text(str(value), keep_math=True) if tex else plain(str(value))
    return text or None


def _year(value: Any) -> int | None:
    m = re.search(r"\b(\d{4})\b", str(value or ""))
    return int(m.group(1)) if m else None


def _entry(key: str, where: str, *, title: Any, abstract: Any = None, authors: list[str] = (), year: Any = None,
           venue: Any = None, doi_text: Any = None, url: Any = None, arxiv: Any = None, extra: list[Any] = (),
           tex: bool = False) -> LibraryEntry:
    """An entry with its identifiers read from every field that may hold one (`extra`: journal,
    note and similar fields where an "arXiv:ID" may sit)."""
    urls = [u for u in (url if isinstance(url, list) else [url]) if u]
    found_arxiv = (arxiv_id(_text(arxiv)) or arxiv_id(_text(doi_text), bare=False)
                   or next((a for u in urls if (a := arxiv_id(str(u), bare=False))), None)
                   or next((a for x in extra if (a := arxiv_id(_text(x), bare=False))), None))
    found_doi = doi(_text(doi_text)) or next((d for u in urls if "doi.org/" in str(u) and (d := doi(str(u)))), None)
    venue_text = _text(venue, tex=tex)
    if venue_text and re.match(r"(arxiv|corr)\b", venue_text, re.IGNORECASE):
        venue_text = None  # "arXiv preprint arXiv:...": the arXiv id, not a venue
    return LibraryEntry(key=plain(key or ""), where=where, title=_text(title, tex=tex),
                        abstract=_text(abstract, tex=tex), authors=[a for a in authors if a],
                        year=_year(year), venue=venue_text, doi=found_doi, arxiv=found_arxiv,
                        url=next((plain(str(u)) for u in urls), None))


def _read_bibtex(text: str, name: str) -> Library:
    import bibtexparser
    from bibtexparser import middlewares

    lib = bibtexparser.parse_string(text, append_middleware=[
        middlewares.SeparateCoAuthors(), middlewares.SplitNameParts(), middlewares.MergeNameParts(style="first")])
    entries = []
    for n, e in enumerate(lib.entries, start=1):
        f = {k.lower(): v.value for k, v in e.fields_dict.items()}
        authors = [latex_to_text(a) for a in (f.get("author") or []) if isinstance(a, str)]
        eprint = f.get("eprint") if str(f.get("archiveprefix") or f.get("eprinttype") or "arxiv").lower() == "arxiv" \
            else None
        entries.append(_entry(e.key, f"{name} entry {n} (line {e.start_line + 1})", title=f.get("title"),
                              abstract=f.get("abstract"), authors=authors, year=f.get("year") or f.get("date"),
                              venue=f.get("booktitle") or f.get("journal") or f.get("journaltitle"),
                              doi_text=f.get("doi"), url=f.get("url"), arxiv=eprint,
                              extra=[f.get("journal"), f.get("note"), f.get("howpublished")], tex=True))
    unreadable = [f"{name} line {b.start_line + 1}: {type(b.error).__name__ if hasattr(b, 'error') else 'unreadable'}"
                  for b in lib.failed_blocks]
    return Library(source=name, format="bibtex", entries=entries, unreadable=unreadable)


def _read_ris(text: str, name: str) -> Library:
    import rispy

    try:
        records = rispy.loads(text)
    except Exception as exc:  # rispy raises IOError / ValueError subclasses on a malformed file
        raise InputValidationError(f"{name}: not a readable RIS file ({exc}); each record runs from TY to ER") from None
    entries = []
    for n, r in enumerate(records, start=1):
        authors = [_ris_name(a) for a in (r.get("authors") or r.get("first_authors") or [])]
        entries.append(_entry(str(r.get("id") or ""), f"{name} record {n}",
                              title=r.get("title") or r.get("primary_title"),
                              abstract=r.get("abstract") or r.get("notes_abstract"), authors=authors,
                              year=r.get("year") or r.get("publication_year") or r.get("date"),
                              venue=(r.get("secondary_title") or r.get("journal_name") or r.get("alternate_title3")
                                     or r.get("alternate_title1")),
                              doi_text=r.get("doi"), url=r.get("urls") or [],
                              extra=[*(r.get("notes") or []), r.get("note")]))
    return Library(source=name, format="ris", entries=entries)


def _ris_name(name: str) -> str:
    """RIS "Last, First" as "First Last"."""
    family, sep, given = plain(name).partition(",")
    return f"{given.strip()} {family.strip()}".strip() if sep else family.strip()


def _read_csljson(text: str, name: str) -> Library:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputValidationError(f"{name}: not valid JSON ({exc}); CSL-JSON is an array of items") from None
    if isinstance(data, dict) and isinstance(data.get("items"), list):
        data = data["items"]
    if not isinstance(data, list):
        raise InputValidationError(f"{name}: CSL-JSON is an array of items, got a JSON {type(data).__name__}")
    entries, unreadable = [], []
    for n, item in enumerate(data, start=1):
        if not isinstance(item, dict):
            unreadable.append(f"{name} item {n}: a JSON {type(item).__name__}, not an object")
            continue
        authors = []
        for a in item.get("author") or []:
            if isinstance(a, dict):
                authors.append(plain(a.get("literal") or " ".join(
                    str(a[k]) for k in ("given", "non-dropping-particle", "family") if a.get(k))))
        issued = item.get("issued") or {}
        parts = issued.get("date-parts") if isinstance(issued, dict) else None
        year = parts[0][0] if parts and isinstance(parts[0], list) and parts[0] else (
            issued.get("raw") if isinstance(issued, dict) else None)
        number = item.get("number")
        entries.append(_entry(str(item.get("id") or ""), f"{name} item {n}", title=item.get("title"),
                              abstract=item.get("abstract"), authors=authors, year=year,
                              venue=item.get("container-title") or item.get("event-title"),
                              doi_text=item.get("DOI") or item.get("doi"), url=item.get("URL") or item.get("url"),
                              arxiv=number if str(item.get("publisher") or "").lower() == "arxiv" else None,
                              extra=[item.get("note"), number]))
    return Library(source=name, format="csljson", entries=entries, unreadable=unreadable)


def _read_ids(text: str, name: str) -> Library:
    entries, unreadable = [], []
    for n, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        a, d = arxiv_id(line), doi(line)
        if a is None and d is None:
            unreadable.append(f"{name} line {n}: {line[:60]!r} is neither a DOI nor an arXiv id")
            continue
        entries.append(LibraryEntry(key=line, where=f"{name} line {n}", doi=None if a else d, arxiv=a))
    return Library(source=name, format="ids", entries=entries, unreadable=unreadable)


# --------------------------------------------------------------------------- matching


def title_key(title: str | None) -> str:
    """A title's matching key: TeX read, accents dropped, case and punctuation folded, spaces removed."""
    if not title:
        return ""
    text = latex_to_text(title, keep_math=True) if ("\\" in title or "{" in title) else title
    text = "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))
    return normalize_title(text)


def url_key(url: str) -> str:
    """A URL's matching key: scheme, "www.", a trailing slash or ".pdf" and case dropped."""
    key = re.sub(r"^[a-z]+://(www\.)?", "", url.strip().lower())
    return re.sub(r"(\.pdf)?/*$", "", key)


def match_library(library: Library, papers: Any) -> LibraryMatch:
    """Match each entry of `library` to a paper of `papers` (a table with `paper_id` and `title`, and
    `doi`, `url`, `arxiv` where the corpus has them: an index's `papers`, a `Corpus.papers`): by DOI,
    then arXiv id without its version, then URL (`url_key`), then title key (`title_key`, unique in the corpus)."""
    cols = set(papers.columns)
    ids = papers["paper_id"].to_list()

    def column(name: str) -> list[Any]:
        return papers[name].to_list() if name in cols else [None] * len(ids)

    by_doi: dict[str, str] = {}
    by_arxiv: dict[str, str] = {}
    by_url: dict[str, str] = {}
    by_title: dict[str, list[str]] = {}
    for pid, title, d, u, a in zip(ids, column("title"), column("doi"), column("url"), column("arxiv")):
        ln = links(pid, doi_text=d, url=u, arxiv=a)
        if ln.doi:
            by_doi.setdefault(ln.doi, pid)
        if ln.arxiv:
            by_arxiv.setdefault(unversioned(ln.arxiv).lower(), pid)
        if ln.url and not ln.arxiv:  # an arXiv page is matched by its id
            by_url.setdefault(url_key(ln.url), pid)
        key = title_key(title)
        if len(key) >= MIN_TITLE_KEY:
            by_title.setdefault(key, []).append(pid)
    matches = []
    for e in library.entries:
        if e.doi and e.doi in by_doi:
            matches.append(Match(e, by_doi[e.doi], "doi"))
        elif e.arxiv and unversioned(e.arxiv).lower() in by_arxiv:
            matches.append(Match(e, by_arxiv[unversioned(e.arxiv).lower()], "arxiv"))
        elif e.url and url_key(e.url) in by_url:
            matches.append(Match(e, by_url[url_key(e.url)], "url"))
        else:
            key = title_key(e.title)
            found = by_title.get(key, []) if len(key) >= MIN_TITLE_KEY else []
            if len(found) == 1:
                matches.append(Match(e, found[0], "title"))
            else:
                note = (f"its title is shared by {len(found)} corpus papers ({', '.join(found[:3])})" if found
                        else None if e.title or e.doi or e.arxiv else "it has no title, DOI or arXiv id")
                matches.append(Match(e, None, None, note))
    return LibraryMatch(library, matches)


# --------------------------------------------------------------------------- corpus records


def entry_id(entry: LibraryEntry, taken: set[str]) -> str:
    """A corpus id for an entry: its arXiv id, else its citation key made one word, else its DOI made
    one word; `_2`, `_3`, ... where `taken` (corpus ids and ids given before) holds it."""
    # a Zotero CSL id is a URI: a key only where it reads as one
    key = entry.key.strip() if re.fullmatch(r"[\w.:+-]+", entry.key.strip()) else ""
    base = entry.arxiv or (bib_key(key) if key else "") or (
        bib_key(entry.doi) if entry.doi else "") or "library"
    pid, n = base, 1
    while pid in taken:
        n += 1
        pid = f"{base}_{n}"
    taken.add(pid)
    return pid


def records(match: LibraryMatch, taken: set[str] = frozenset(),
            ) -> tuple[list[tuple[LibraryEntry, dict[str, Any]]], list[LibraryEntry]]:
    """(entry, corpus record) of each entry that matched no corpus paper and carries a title and an
    abstract (the JSONL fields `graft build` reads: id, title, abstract, year, venue, authors, doi,
    url, arxiv); and the unmatched entries left out for want of one. `taken`: the ids already in use."""
    taken = set(taken)
    out, left = [], []
    for m in match.matches:
        if m.paper_id is not None:
            continue
        e = m.entry
        if not (e.title and e.abstract):
            left.append(e)
            continue
        rec: dict[str, Any] = {"id": entry_id(e, taken), "title": e.title, "abstract": e.abstract}
        for name in ("year", "venue", "doi", "url", "arxiv"):
            if getattr(e, name):
                rec[name] = getattr(e, name)
        if e.authors:
            rec["authors"] = e.authors
        out.append((e, rec))
    return out, left
