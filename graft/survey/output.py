"""The survey's files: survey.md (headings, cited paragraphs, references), references.bib (one entry
per cited paper, from corpus metadata) and survey.json (everything, for audit). All written atomically.

The topic, every text taken from papers and every string an LLM answered (headings, clauses, the
connective between two clauses) are data: Markdown control characters are escaped in survey.md and
TeX specials in references.bib, so a topic such as `# x [y](z)` or a title with `&` renders as
written.
"""

from __future__ import annotations

import re
from contextlib import ExitStack
from dataclasses import asdict
from pathlib import Path
from typing import Any

from graft.bibliography import bibtex, entries, one_venue, plain
from graft.index import Index
from graft.store import atomic_path, folder_problem, json_text
from graft.survey.config import SurveyError
from graft.survey.latex import to_markdown
from graft.survey.types import REF_CLOSE, REF_OPEN, TABLE_COLUMNS, Clause, Section, Sentence, join_clauses
from graft.survey.verify import SUPPORTED

_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#|~!$&])")


def md_escape(text: str) -> str:
    """Text as literal Markdown: control characters removed, Markdown's special characters (and `&`,
    which would start an entity) backslash-escaped, line breaks folded, and a leading list/heading
    marker neutralised."""
    text = _MD_SPECIAL.sub(r"\\\1", plain(text))
    text = re.sub(r"^([-+=])(\s)", r"\\\1\2", text)
    return re.sub(r"^(\d+)([.)])(\s)", r"\1\\\2\3", text)


def md_text(text: str) -> str:
    """Paper text as Markdown: LaTeX math as `$...$`, text commands as emphasis, the rest literal
    (`md_escape`); no backslash of the source shows."""
    return to_markdown(plain(text), md_escape)


def shown(clause: Clause) -> bool:
    """A clause is printed when its citation is supported, or unverified with verification off."""
    return clause.citation.status in SUPPORTED or clause.citation.status == "unverified"


def printed(sentence: Sentence) -> list[Clause]:
    return [] if sentence.dropped else [c for c in sentence.clauses if shown(c)]


def numbering(sections: list[Section]) -> dict[str, int]:
    """Reference numbers in order of first citation (prose, then tables)."""
    order: dict[str, int] = {}
    for sec in sections:
        for s in sec.sentences():
            for c in printed(s):
                order.setdefault(c.citation.paper_id, len(order) + 1)
        for row in sec.table:
            order.setdefault(row.paper_id, len(order) + 1)
    return order


_REF = re.compile(f"{REF_OPEN}([^{REF_CLOSE}]*){REF_CLOSE}")


def render_refs(text: str, numbers: dict[str, int]) -> str | None:
    """A computed statement (`types.ref` marks for papers) as Markdown with reference numbers; None
    when it names a paper the survey does not print (the statement would point at nothing)."""
    out, pos = [], 0
    for m in _REF.finditer(text):
        if m.group(1) not in numbers:
            return None
        out += [_spaced(text[pos:m.start()]), f"[{numbers[m.group(1)]}]"]
        pos = m.end()
    out.append(_spaced(text[pos:]))
    return "".join(out).strip()


def _spaced(piece: str) -> str:
    """A piece of text as Markdown, keeping the spaces at its ends."""
    if not piece.strip():
        return " " if piece else ""
    return (" " if piece[0].isspace() else "") + md_text(piece) + (" " if piece[-1].isspace() else "")


def render_sentence(sentence: Sentence, numbers: dict[str, int]) -> str:
    """One sentence: each clause followed by its own citation, "A [1], while B [2]."; "" when no clause
    is printed (never a sentence with an empty citation). An opener that names a paper the survey
    does not print is left out."""
    clauses = printed(sentence)
    if not clauses:
        return ""
    # the lead ("while") may be a model's words: data, escaped as the clause is
    parts = [(md_escape(c.lead), md_text(c.text).rstrip(" ."), str(numbers[c.citation.paper_id])) for c in clauses]
    opener = render_refs(sentence.opener, numbers) if sentence.opener else ""
    return join_clauses(parts, opener or "")


def _cell(text: str) -> str:
    # a pipe inside math would end the cell: Markdown's escape holds there too
    return re.sub(r"(?<!\\)\|", r"\\|", md_text(text)) if text else "—"


def render_table(sec: Section, numbers: dict[str, int], i: int) -> list[str]:
    if not sec.table:
        return []
    heads = [h for _, h in TABLE_COLUMNS]
    lines = [f"*Table {i}. {md_escape(sec.title)}: what the prose does not say — each paper's year, the benchmarks "
             "and metrics its abstract names, and the surveyed papers it cites that are not newer.*", "",
             "| Paper | " + " | ".join(heads) + " |", "|---|" + "---|" * len(heads)]
    for row in sec.table:
        who = f"{md_text(row.name)} [{numbers[row.paper_id]}]" if row.name else f"[{numbers[row.paper_id]}]"
        cells = []
        for key, _ in TABLE_COLUMNS:
            text = row.cells.get(key, "")
            got = render_refs(text, numbers) if text else ""
            cells.append(re.sub(r"(?<!\\)\|", r"\\|", got) if got else "—")
        lines.append(f"| {who} | " + " | ".join(cells) + " |")
    return lines + [""]


def render_coverage(coverage: dict[str, Any] | None, numbers: dict[str, int]) -> list[str]:
    """The "Coverage and blind spots" appendix."""
    if not coverage:
        return []
    lines = ["## Coverage and blind spots", ""]
    central = coverage.get("central", [])
    if central:
        lines.append("Central papers (most linked by citations within the retrieved papers): " + "; ".join(
            f"{md_text(c['title'])}" + (f" [{numbers[c['paper_id']]}], in \"{md_escape(c['section'])}\""
                                          if c.get("section") and c["paper_id"] in numbers else " (not discussed)")
            for c in central) + ".")
        lines.append("")
    if coverage.get("left_out"):
        lines += ["Strong candidates left out (retrieved and reranked, but not written about):", ""]
        lines += [f"- {md_text(x['title'])} (`{md_escape(x['paper_id'])}`): {md_escape(x['why'])}"
                  for x in coverage["left_out"]]
        lines.append("")
    if coverage.get("off_topic"):
        lines += ["Kept out as off-topic (retrieved, but too far from the topic):", ""]
        lines += [f"- {md_text(x['title'])} (`{md_escape(x['paper_id'])}`): {md_escape(x['why'])}"
                  for x in coverage["off_topic"]]
        lines.append("")
    if coverage.get("off_topic_sections"):
        lines += ["Groups not written as sections (their papers are not about the topic, or share no theme):", ""]
        for x in coverage["off_topic_sections"]:
            lines.append(f"- {md_escape(x['title'])}: " + "; ".join(
                f"{md_text(p['title'])} (`{md_escape(p['paper_id'])}`)" for p in x["papers"]) + f" ({md_escape(x['why'])})")
        lines.append("")
    thin = coverage.get("thin_sections", [])
    if thin:
        lines += ["Thin sections:", ""]
        for t in thin:
            bits = [f"{t['papers']} paper{'s' if t['papers'] != 1 else ''} discussed"]
            if t["missing"]:
                bits.append("no " + " or ".join(f"{m} statement" for m in t["missing"]) + " passed the checks")
            lines.append(f"- {md_escape(t['section'])}: " + "; ".join(bits))
        lines.append("")
    stated = coverage.get("statements")
    if stated:
        lines += [f"Of the {stated['papers']} papers discussed, {stated['all_three']} have their problem, method and "
                  f"result stated; {stated['method']} their method, {stated['result']} a result and "
                  f"{stated['problem']} their problem (a paper that addresses the same problem as one before it "
                  "is not given the problem again).", ""]
    return lines


def render_markdown(title: str, sections: list[Section], index: Index, numbers: dict[str, int], note: str,
                    coverage: dict[str, Any] | None = None) -> str:
    lines = [f"# {md_escape(title)}", "", f"*{md_escape(note)}*", ""]
    for i, sec in enumerate(sections, 1):
        lines += [f"## {i} {md_escape(sec.title)}", ""]
        summary = render_refs(sec.summary, numbers) if sec.summary else None
        if summary:
            lines += [summary, ""]
        for para in sec.paragraphs:
            text = " ".join(t for t in (render_sentence(s, numbers) for s in para.sentences) if t)
            if text:
                lines += [text, ""]
        lines += render_table(sec, numbers, i)
    lines += render_coverage(coverage, numbers)
    lines += ["## References", ""]
    papers = index.papers
    for pid, n in sorted(numbers.items(), key=lambda x: x[1]):
        row = index.row(pid)
        year = papers["year"][row]
        venue = one_venue(papers["venue"][row]) if "venue" in papers.columns else None
        bits = [md_text(papers["title"][row])]
        if venue:
            bits.append(md_escape(venue))
        if year:
            bits.append(str(year))
        lines.append(f"{n}. {'. '.join(bits)}. `{md_escape(pid).replace('`', '')}`")
    return "\n".join(lines).rstrip() + "\n"


def render_bibtex(index: Index, numbers: dict[str, int]) -> str:
    """references.bib: one entry per cited paper, from corpus metadata, in citation order
    (`graft.bibliography.bibtex`, the writer `graft export --format bibtex` uses)."""
    ordered = [pid for pid, _ in sorted(numbers.items(), key=lambda x: x[1])]
    return bibtex(entries(index, ordered, abstracts=False))


def survey_json(topic: str, title: str, sections: list[Section], numbers: dict[str, int],
                meta: dict[str, Any]) -> dict[str, Any]:
    changes = []
    for sec in sections:
        for s in sec.sentences():
            for c in s.clauses:
                if c.citation.status in ("repaired", "removed"):
                    changes.append({"clause": c.text, "original": c.original, "paper_id": c.citation.paper_id,
                                    "status": c.citation.status, "note": c.citation.note})
    return {
        "topic": topic,
        "title": title,
        "outline": [{"title": sec.title, "description": sec.description, "papers": sec.papers,
                     "paragraphs": [p.part for p in sec.paragraphs]} for sec in sections],
        "sections": [asdict(sec) for sec in sections],
        "references": [{"number": n, "paper_id": pid} for pid, n in sorted(numbers.items(), key=lambda x: x[1])],
        "citation_changes": changes,
        **meta,
    }


OUTPUT_FILES = {"markdown": "survey.md", "bibtex": "references.bib", "json": "survey.json"}


def check_out_dir(out_dir: Path) -> None:
    """Refuse, before any work, a survey folder that cannot be written (`folder_problem`: a file, a
    path under a file or an unwritable folder, a name the file system refuses).

    Raises:
        SurveyError: naming the path.
    """
    problem = folder_problem(out_dir)
    if problem:
        raise SurveyError(f"--out {out_dir} {problem}; give a folder for the survey")
    _check_targets(out_dir)


def _check_targets(out_dir: Path) -> None:
    """Refuse a survey folder where one of the output names is taken by something a file cannot
    replace (a folder): found only at the rename, it would leave the files renamed before it new
    and the rest old."""
    for name in OUTPUT_FILES.values():
        target = out_dir / name
        if target.is_dir() and not target.is_symlink():
            raise SurveyError(f"--out {out_dir}: {name} there is a folder, which the survey's {name} cannot "
                              f"replace; move it or give another folder")


def write_outputs(out_dir: Path, *, topic: str, title: str, sections: list[Section], index: Index,
                  note: str, meta: dict[str, Any], coverage: dict[str, Any] | None = None) -> dict[str, Path]:
    """Write survey.md, references.bib and survey.json into `out_dir`; returns their paths.

    The three are written in full beside their targets first and only then renamed onto them, one
    after the other, survey.json (the record of a finished survey) last: a survey stopped while it
    writes leaves the earlier files, and only one stopped between those three renames
    (microseconds) leaves a mixture. A target that cannot be replaced (a folder) is refused before
    anything is written. Temporary files a killed run left there are removed.

    Raises:
        SurveyError: the folder or a file cannot be written.
    """
    numbers = numbering(sections)
    texts = {"markdown": render_markdown(title, sections, index, numbers, note, coverage),
             "bibtex": render_bibtex(index, numbers),
             "json": json_text(survey_json(topic, title, sections, numbers, meta))}
    paths = {kind: out_dir / name for kind, name in OUTPUT_FILES.items()}
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name in OUTPUT_FILES.values():
            for stale in out_dir.glob(f".{name}.*.tmp"):
                stale.unlink()
        _check_targets(out_dir)
        with ExitStack() as stack:
            # each temporary file replaces its target when the stack closes, after all are written;
            # the stack closes last-in first-out, so they are entered in reverse: survey.json is renamed last
            temps = {kind: stack.enter_context(atomic_path(paths[kind])) for kind in reversed(paths)}
            for kind, tmp in temps.items():
                tmp.write_text(texts[kind], encoding="utf-8")
    except OSError as exc:
        raise SurveyError(f"--out {out_dir}: cannot write the survey there ({exc.strerror or exc})") from None
    return paths
