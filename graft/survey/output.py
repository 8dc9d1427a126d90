"""The survey's files: survey.md (headings, cited paragraphs, references), references.bib (one entry
per cited paper, from corpus metadata) and survey.json (everything, for audit). All written atomically.

The topic and every text taken from papers are data: Markdown control characters are escaped in
survey.md and TeX specials in references.bib, so a topic such as `# x [y](z)` or a title with `&`
renders as written.
"""

from __future__ import annotations

import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

from graft.index import Index
from graft.store import atomic_path, write_json
from graft.survey.types import Section, Sentence
from graft.survey.verify import SUPPORTED

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#|~!$])")


def md_escape(text: str) -> str:
    """Text as literal Markdown: control characters backslash-escaped, line breaks folded, and a
    leading list/heading marker neutralised."""
    text = " ".join(str(text).split())
    text = _MD_SPECIAL.sub(r"\\\1", text)
    text = re.sub(r"^([-+=])(\s)", r"\\\1\2", text)
    return re.sub(r"^(\d+)([.)])(\s)", r"\1\\\2\3", text)


_TEX = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
        "_": r"\_", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def tex_escape(text: str) -> str:
    """Text as a literal BibTeX field value."""
    return "".join(_TEX.get(ch, ch) for ch in " ".join(str(text).split()))


def bib_key(paper_id: str) -> str:
    """A BibTeX key from a corpus id: letters, digits and underscores only, never starting with a digit."""
    key = re.sub(r"[^A-Za-z0-9]+", "_", paper_id).strip("_")
    return f"p{key}" if not key or not key[0].isalpha() else key


def shown_citations(sentence: Sentence) -> list[str]:
    """The citations printed for a sentence: supported ones, or unverified ones when verification is off."""
    return [c.paper_id for c in sentence.citations if c.status in SUPPORTED or c.status == "unverified"]


def numbering(sections: list[Section]) -> dict[str, int]:
    """Reference numbers in order of first citation."""
    order: dict[str, int] = {}
    for sec in sections:
        for sub in sec.subsections:
            for s in sub.sentences:
                if s.dropped:
                    continue
                for pid in shown_citations(s):
                    order.setdefault(pid, len(order) + 1)
    return order


def render_markdown(title: str, sections: list[Section], index: Index, numbers: dict[str, int],
                    note: str) -> str:
    lines = [f"# {md_escape(title)}", "", f"*{md_escape(note)}*", ""]
    for i, sec in enumerate(sections, 1):
        lines += [f"## {i} {md_escape(sec.title)}", ""]
        for j, sub in enumerate(sec.subsections, 1):
            if len(sec.subsections) > 1 or sub.title != sec.title:
                lines += [f"### {i}.{j} {md_escape(sub.title)}", ""]
            # one paragraph per group of sentences about the same papers
            paragraphs: list[list[str]] = [[]]
            cited_here: set[str] = set()
            for s in sub.sentences:
                if s.dropped:
                    continue
                shown = shown_citations(s)
                if len(paragraphs[-1]) >= 3 and shown[0] not in cited_here:
                    paragraphs.append([])
                    cited_here = set()
                cited_here.update(shown)
                refs = sorted({numbers[p] for p in shown})
                text = md_escape(s.text).rstrip(".")
                paragraphs[-1].append(f"{text} [{', '.join(str(n) for n in refs)}].")
            for para in paragraphs:
                if para:
                    lines += [" ".join(para), ""]
    lines += ["## References", ""]
    papers = index.papers
    for pid, n in sorted(numbers.items(), key=lambda x: x[1]):
        row = index.row(pid)
        year = papers["year"][row]
        venue = papers["venue"][row] if "venue" in papers.columns else None
        bits = [md_escape(papers["title"][row])]
        if venue:
            bits.append(md_escape(venue))
        if year:
            bits.append(str(year))
        lines.append(f"{n}. {'. '.join(bits)}. `{pid}`")
    return "\n".join(lines).rstrip() + "\n"


def render_bibtex(index: Index, numbers: dict[str, int]) -> str:
    papers = index.papers
    entries = []
    for pid, _ in sorted(numbers.items(), key=lambda x: x[1]):
        row = index.row(pid)
        fields = [("title", "{" + tex_escape(papers["title"][row]) + "}")]
        authors = papers["authors"][row] if "authors" in papers.columns else None
        if authors is not None and len(authors):
            fields.append(("author", " and ".join(tex_escape(a) for a in authors)))
        if papers["year"][row]:
            fields.append(("year", str(papers["year"][row])))
        venue = papers["venue"][row] if "venue" in papers.columns else None
        if venue:
            fields.append(("booktitle", tex_escape(venue)))
        fields.append(("note", f"corpus id {tex_escape(pid)}"))
        body = ",\n".join(f"  {k} = {{{v}}}" for k, v in fields)
        entries.append(f"@inproceedings{{{bib_key(pid)},\n{body}\n}}")
    return "\n\n".join(entries) + ("\n" if entries else "")


def survey_json(topic: str, title: str, sections: list[Section], numbers: dict[str, int],
                meta: dict[str, Any]) -> dict[str, Any]:
    repaired = []
    for sec in sections:
        for sub in sec.subsections:
            for s in sub.sentences:
                for c in s.citations:
                    if c.status in ("repaired", "replaced", "removed"):
                        repaired.append({"sentence": s.text, "paper_id": c.paper_id, "status": c.status,
                                         "replaced": c.replaced, "note": c.note})
    return {
        "topic": topic,
        "title": title,
        "outline": [{"title": sec.title, "description": sec.description,
                     "subsections": [sub.title for sub in sec.subsections]} for sec in sections],
        "sections": [asdict(sec) for sec in sections],
        "references": [{"number": n, "paper_id": pid} for pid, n in sorted(numbers.items(), key=lambda x: x[1])],
        "citation_changes": repaired,
        **meta,
    }


def write_outputs(out_dir: Path, *, topic: str, title: str, sections: list[Section], index: Index,
                  note: str, meta: dict[str, Any]) -> dict[str, Path]:
    """Write survey.md, references.bib and survey.json into `out_dir`; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    numbers = numbering(sections)
    paths = {"markdown": out_dir / "survey.md", "bibtex": out_dir / "references.bib", "json": out_dir / "survey.json"}
    with atomic_path(paths["markdown"]) as tmp:
        tmp.write_text(render_markdown(title, sections, index, numbers, note), encoding="utf-8")
    with atomic_path(paths["bibtex"]) as tmp:
        tmp.write_text(render_bibtex(index, numbers), encoding="utf-8")
    write_json(paths["json"], survey_json(topic, title, sections, numbers, meta))
    return paths
