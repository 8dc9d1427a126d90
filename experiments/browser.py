"""`graft serve` in a child process and headless Chromium driving its page: what the explorer's
browser test (tests/test_web_browser.py) and its latency experiment (`experiments.serve_latency`)
both start. Chromium is Debian's `chromium` with `chromium-driver`, driven by Selenium."""

from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Headless Chromium as root on a machine without a network: no sandbox, no background connections.
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1400,900")


def start_server(index: Path, surveys: Path, *, cores: int = 0,
                 timeout: float = 180) -> tuple[subprocess.Popen, str]:
    """`graft serve INDEX --port 0` in a child process (pinned to its first `cores` CPUs with
    taskset when given and available); returns it and the URL it printed.

    Raises:
        RuntimeError: no URL within `timeout` seconds, or the server exited (with what it printed).
    """
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "COLUMNS": "300"}
    cmd = [sys.executable, "-m", "cli.app", "serve", str(index), "--port", "0", "--surveys", str(surveys)]
    if cores and shutil.which("taskset"):
        cmd = ["taskset", "-c", ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:cores]), *cmd]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline, seen = time.time() + timeout, []
    while time.time() < deadline:
        if select.select([proc.stdout], [], [], 1.0)[0]:
            line = proc.stdout.readline()
            seen.append(line)
            m = re.search(r"http://127\.0\.0\.1:\d+/", line)
            if m:
                return proc, m.group(0)
        if proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("graft serve printed no URL:\n" + "".join(seen))


def open_browser(download_dir: Path | None = None):
    """A Selenium driver of headless Chromium with a fresh profile (downloads into `download_dir`)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={tempfile.mkdtemp(prefix='graft-chromium-')}"):
        opts.add_argument(flag)
    if download_dir is not None:
        opts.add_experimental_option("prefs", {"download.default_directory": str(download_dir)})
    return webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))
