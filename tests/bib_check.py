"""The check every references.bib the tests see goes through: it formats, with no missing field, in
pybtex's `plain` style (strict) and in BibTeX itself with `plain.bst` (no warning, no error).

BibTeX is Debian's `bibtex` (packages texlive-binaries and texlive-base, which `make setup`
installs as root); without it that half of the check skips, saying so."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def formats_in_pybtex_plain(path: Path) -> str:
    """The file formatted by pybtex's `plain` style in strict mode (a missing field raises)."""
    import pybtex
    import pybtex.errors

    strict = pybtex.errors.strict
    pybtex.errors.set_strict_mode(True)
    try:
        return pybtex.format_from_file(str(path), "plain", citations=["*"], output_backend="plaintext")
    finally:
        pybtex.errors.set_strict_mode(strict)


def formats_in_bibtex_plain(path: Path, work: Path) -> str:
    """The file run through BibTeX with plain.bst in `work`; fails on any warning or error, skips
    when `bibtex` is not installed. Returns the .bbl BibTeX wrote."""
    if shutil.which("bibtex") is None:
        pytest.skip("bibtex is not installed (Debian: apt-get install texlive-binaries texlive-base, "
                    "which `make setup` does as root)")
    work.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, work / "refs.bib")
    (work / "check.aux").write_text("\\citation{*}\n\\bibstyle{plain}\n\\bibdata{refs}\n", encoding="utf-8")
    run = subprocess.run(["bibtex", "check"], cwd=work, capture_output=True, text=True, timeout=60)
    log = (work / "check.blg").read_text(encoding="utf-8", errors="replace")
    assert run.returncode == 0 and "Warning--" not in log and "error message" not in log, log
    return (work / "check.bbl").read_text(encoding="utf-8", errors="replace")


def assert_formats_in_plain_style(path: Path, work: Path) -> None:
    """`path` formats in pybtex's plain style and in BibTeX's plain.bst."""
    assert formats_in_pybtex_plain(path).strip()
    formats_in_bibtex_plain(path, work)
