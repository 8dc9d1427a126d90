"""A paper's identifiers outside the corpus: DOIs, arXiv ids and ACL Anthology ids, read from the
forms reference managers and corpora write them in, and the links they give.

- `doi("https://doi.org/10.18653/V1/P17-1001")` -> "10.18653/v1/p17-1001" (DOIs are case-insensitive;
  the lower-case form is the key);
- `arxiv_id("arXiv:2106.04689v2")`, `arxiv_id("https://arxiv.org/abs/2106.04689")`,
  `arxiv_id("10.48550/arXiv.2106.04689")` -> "2106.04689v2" / "2106.04689" (the version, when given,
  is kept; `unversioned` drops it for matching);
- `links(paper_id, doi=..., url=..., arxiv=...)`: the identifiers a corpus paper has, from its record's
  fields or, where the corpus uses them as ids, from its id (cs768's ids are arXiv ids, ACLSum's are ACL
  Anthology ids), with the URL to show.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

#: A DOI: "10." + registrant + "/" + suffix (Crossref's recommended pattern, suffix without spaces).
_DOI = re.compile(r"(10\.\d{4,9}/\S+)", re.IGNORECASE)
#: arXiv's DOIs (since 2022): 10.48550/arXiv.YYMM.NNNNN.
_ARXIV_DOI = re.compile(r"10\.48550/arxiv\.(.+)", re.IGNORECASE)
#: New-style arXiv ids (YYMM.NNNN or YYMM.NNNNN, optional vN) and old-style (archive[.SUB]/YYMMNNN).
_ARXIV_NEW = r"\d{4}\.\d{4,5}(?:v\d+)?"
_ARXIV_OLD = r"[a-z][a-z\-]+(?:\.[A-Z]{2})?/\d{7}(?:v\d+)?"
_ARXIV_ID = re.compile(rf"({_ARXIV_NEW}|{_ARXIV_OLD})")
_ARXIV_WHOLE = re.compile(rf"(?:{_ARXIV_NEW}|{_ARXIV_OLD})")
#: Where an arXiv id sits in text: "arXiv:ID", an arxiv.org URL (abs, pdf, html), or alone.
_ARXIV_IN = re.compile(rf"(?:arxiv\s*:\s*|arxiv\.org/(?:abs|pdf|html)/)({_ARXIV_NEW}|{_ARXIV_OLD})", re.IGNORECASE)
_VERSION = re.compile(r"v\d+$")
#: ACL Anthology ids: old style "P06-1112", new style "2020.acl-main.33".
_ACL_ID = re.compile(r"[A-Z]\d{2}-\d{4}|\d{4}\.[a-z0-9]+(?:-[a-z0-9]+)*\.\d+")


def doi(text: str | None) -> str | None:
    """The DOI in `text` (a bare DOI, "doi:...", a doi.org URL), lower-cased, or None."""
    if not text:
        return None
    m = _DOI.search(unquote(str(text)).strip())
    if m is None:
        return None
    found = m.group(1).rstrip(".,;>")
    # a closing bracket ends the DOI only when the DOI did not open it ("(see doi:10.1/x)")
    while found[-1:] in ")]}" and found.count(found[-1]) > found.count({")": "(", "]": "[", "}": "{"}[found[-1]]):
        found = found[:-1].rstrip(".,;")
    return found.lower()


def arxiv_id(text: str | None, *, bare: bool = True) -> str | None:
    """The arXiv id in `text`: "arXiv:ID", an arxiv.org URL, arXiv's DOI 10.48550/arXiv.ID, or (with
    `bare`) a text that is an id and nothing else; None where there is none. A version suffix, when
    given, is kept."""
    if not text:
        return None
    text = unquote(str(text)).strip()
    m = _ARXIV_DOI.search(text)
    if m is not None:
        found = _ARXIV_ID.match(m.group(1))
        return found.group(1) if found else None
    m = _ARXIV_IN.search(text)
    if m is not None:
        return m.group(1)
    if bare and _ARXIV_WHOLE.fullmatch(text):
        return text
    return None


def unversioned(arxiv: str) -> str:
    """An arXiv id without its version suffix ("2106.04689v2" -> "2106.04689"): the key two records
    of one paper share whatever version each cites."""
    return _VERSION.sub("", arxiv)


def is_acl_id(paper_id: str) -> bool:
    """True for an ACL Anthology id ("P06-1112", "2020.acl-main.33")."""
    return bool(_ACL_ID.fullmatch(paper_id))


@dataclass(frozen=True)
class Links:
    """What identifies a paper outside the corpus, each None where unknown."""

    doi: str | None = None
    arxiv: str | None = None
    url: str | None = None

    def as_dict(self) -> dict[str, str]:
        return {k: v for k, v in (("doi", self.doi), ("arxiv", self.arxiv), ("url", self.url)) if v}


def links(paper_id: str, *, doi_text: str | None = None, url: str | None = None,
          arxiv: str | None = None) -> Links:
    """A corpus paper's identifiers: its record's `doi`, `arxiv` and `url` fields where it has them;
    else an arXiv id from its DOI, URL or its id when the id is one (cs768's ids are); a URL is the
    record's, else the arXiv abstract page, the DOI's resolver, or the ACL Anthology page of an ACL
    Anthology id (ACLSum's ids are).
    """
    d = doi(doi_text)
    a = arxiv_id(arxiv) or arxiv_id(doi_text, bare=False) or arxiv_id(url, bare=False) or arxiv_id(paper_id)
    if url and not re.match(r"https?://", url.strip(), re.IGNORECASE):
        url = None  # only web links: a file path or "n/a" is not a link
    if not url:
        if a:
            url = f"https://arxiv.org/abs/{a}"
        elif d:
            url = f"https://doi.org/{d}"
        elif is_acl_id(paper_id):
            url = f"https://aclanthology.org/{paper_id}"
    return Links(doi=d, arxiv=a, url=url.strip() if url else None)
