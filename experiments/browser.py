"""`graft serve` in a child process and headless Chromium driving its page: what the explorer's
browser test (tests/test_web_browser.py) and its latency experiment (`experiments.serve_latency`)
both start. Chromium is Debian's `chromium` with `chromium-driver`, driven by Selenium."""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Headless Chromium as root on a machine without a network: no sandbox, no background connections.
CHROMIUM_FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1400,900")


def start_server(index: Path, surveys: Path, *, cores: int = 0,
                 timeout: float = 180, args: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """`graft serve INDEX --port 0 [ARGS]` in a child process (pinned to its first `cores` CPUs with
    taskset when given and available, `env` added to the environment); returns it and the URL it
    printed, with its token (`http://127.0.0.1:PORT/?token=...`: `page_url` and `api` keep it).
    What it printed up to the URL is kept as `proc.printed`.

    Raises:
        RuntimeError: no URL within `timeout` seconds, or the server exited (with what it printed).
    """
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1", "COLUMNS": "300", **(env or {})}
    cmd = [sys.executable, "-m", "cli.app", "serve", str(index), "--port", "0", "--surveys", str(surveys), *args]
    if cores and shutil.which("taskset"):
        cmd = ["taskset", "-c", ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:cores]), *cmd]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    # read the pipe's bytes as they come (os.read), never through the buffered text reader: its
    # readline can pull the URL's line into its own buffer with the line before, and select() then
    # waits on an empty pipe until the timeout; a URL counts once the space after it has come
    deadline, seen, fd = time.time() + timeout, b"", proc.stdout.fileno()
    while time.time() < deadline:
        if select.select([fd], [], [], 1.0)[0]:
            chunk = os.read(fd, 1 << 16)
            seen += chunk
            m = re.search(r"http://[^\s/]+:\d+/\?token=[A-Za-z0-9._~-]+(?=\s)", seen.decode(errors="replace"))
            if m:
                proc.printed = seen.decode(errors="replace")  # type: ignore[attr-defined]
                return proc, m.group(0)
            if not chunk and proc.poll() is not None:
                break
        elif proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("graft serve printed no URL:\n" + seen.decode(errors="replace"))


def token_of(url: str) -> str:
    """The token of a URL `graft serve` printed."""
    return urllib.parse.parse_qs(urllib.parse.urlparse(url).query)["token"][0]


def page_url(url: str, **params: object) -> str:
    """The page at `url` (as `graft serve` printed it) with view parameters (`paper=`, `k=`, ...),
    its token kept first."""
    base = url.split("?", 1)[0]
    return base + "?" + urllib.parse.urlencode({"token": token_of(url), **params})


def api(url: str, path: str, body: dict | None = None, timeout: float = 60) -> dict:
    """A JSON API answer of the server at `url` (GET, or POST of `body`), with its token."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url.split("?", 1)[0].rstrip("/") + path, data=data,
                                 headers={"Content-Type": "application/json", "X-Graft-Token": token_of(url)})
    with urllib.request.urlopen(req, timeout=timeout) as res:
        return json.loads(res.read())


def wait_for(driver, script: str, timeout: float = 120, poll: float = 0.01):
    """The first truthy value `script` returns in the page, polled every `poll` seconds; exits after
    `timeout` seconds naming the script."""
    t0 = time.time()
    while time.time() - t0 < timeout:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(poll)
    raise SystemExit(f"timed out: {script}")


def open_browser(download_dir: Path | None = None, flags: tuple[str, ...] = ()):
    """A Selenium driver of headless Chromium with a fresh profile (downloads into `download_dir`,
    `flags` added to `CHROMIUM_FLAGS`)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for flag in (*CHROMIUM_FLAGS, *flags, f"--user-data-dir={tempfile.mkdtemp(prefix='graft-chromium-')}"):
        opts.add_argument(flag)
    if download_dir is not None:
        opts.add_experimental_option("prefs", {"download.default_directory": str(download_dir)})
    return webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))
