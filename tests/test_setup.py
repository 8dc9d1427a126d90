"""The set-up says what it installs outside .venv/ and can be told not to: the Makefile's browser
step (Debian's chromium and chromium-driver, for the explorer's browser test) and its BibTeX step
(texlive-binaries and texlive-base, for the references.bib tests), run with a PATH that lacks them
and holds a stand-in apt-get that records what it was asked."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from conftest import REPO

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _run_browser_step(tmp_path, step: str = "browser", **env: str) -> tuple[str, str]:
    """`make browser` (or the BibTeX step, `step="bibtex"`) with .venv/ in `tmp_path` (its set-up
    stamp taken as done) and a PATH of `touch`, `id` and an apt-get that logs its arguments;
    (output, apt-get's log)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in ("touch", "id"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    log = tmp_path / "apt.log"
    apt = bin_dir / "apt-get"
    apt.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\n")
    apt.chmod(0o755)
    venv = tmp_path / "venv"
    venv.mkdir(exist_ok=True)
    (venv / ".installed").touch()
    target = "browser" if step == "browser" else str(venv / ".bibtex")
    res = subprocess.run([shutil.which("make"), "-s", "-C", str(REPO), f"VENV={venv}", target],
                         env={"PATH": str(bin_dir), "HOME": str(tmp_path), **env}, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (venv / f".{step}").is_file()
    return res.stdout, log.read_text() if log.exists() else ""


def test_graft_no_apt_skips_the_root_install_and_says_so(tmp_path) -> None:
    out, apt = _run_browser_step(tmp_path, GRAFT_NO_APT="1")
    assert apt == ""
    assert "GRAFT_NO_APT is set: chromium and chromium-driver are not installed" in out
    assert "browser test will skip" in out


@pytest.mark.skipif(os.geteuid() != 0, reason="the install branch runs as root only")
def test_as_root_the_install_is_announced_before_apt_runs(tmp_path) -> None:
    out, apt = _run_browser_step(tmp_path)
    assert "installing Debian's chromium and chromium-driver and their dependencies as root" in out
    assert "GRAFT_NO_APT=1 skips" in out
    assert apt.splitlines() == ["install -y -q chromium chromium-driver"]


def test_graft_no_apt_skips_the_bibtex_install_and_says_so(tmp_path) -> None:
    out, apt = _run_browser_step(tmp_path, "bibtex", GRAFT_NO_APT="1")
    assert apt == ""
    assert "GRAFT_NO_APT is set: bibtex is not installed" in out


@pytest.mark.skipif(os.geteuid() != 0, reason="the install branch runs as root only")
def test_as_root_the_bibtex_install_is_announced_before_apt_runs(tmp_path) -> None:
    out, apt = _run_browser_step(tmp_path, "bibtex")
    assert out.index("installing Debian's texlive-binaries and texlive-base") == 0
    assert apt.splitlines() == ["install -y -q --no-install-recommends texlive-binaries texlive-base"]
