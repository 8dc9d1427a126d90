"""How fast `graft serve`'s page answers, measured in headless Chromium: first paint of a paper's
graph (from the navigation to the first frame drawn with the graph, a fresh page load each time)
and re-centre (from the click on "Re-centre on this paper" to the first frame of the new graph).
The server runs the graph teacher and is pinned to the given number of cores.

    python -m experiments.serve_latency INDEX [--runs 10] [--cores 2] [--k 20] [--out results.md]

Needs Debian's chromium and chromium-driver and selenium (as the browser test).
"""

from __future__ import annotations

import json
import os
import random
import re
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from experiments.common import parser

REPO = Path(__file__).resolve().parent.parent
FLAGS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--window-size=1400,900")


def start(index: Path, cores: int, surveys: Path) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "cli.app", "serve", str(index), "--port", "0", "--surveys", str(surveys)]
    if shutil.which("taskset") and cores:
        cmd = ["taskset", "-c", ",".join(str(c) for c in sorted(os.sched_getaffinity(0))[:cores]), *cmd]
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    t0, lines = time.time(), []
    while time.time() - t0 < 600:
        if select.select([proc.stdout], [], [], 1.0)[0]:
            line = proc.stdout.readline()
            lines.append(line)
            m = re.search(r"http://127\.0\.0\.1:\d+/", line)
            if m:
                return proc, m.group(0)
        if proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit("graft serve printed no URL:\n" + "".join(lines))


def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = shutil.which("chromium")
    for flag in (*FLAGS, f"--user-data-dir={tempfile.mkdtemp(prefix='graft-chromium-')}"):
        opts.add_argument(flag)
    return webdriver.Chrome(options=opts, service=Service(shutil.which("chromedriver")))


def wait(driver, script: str, timeout: float = 120):
    t0 = time.time()
    while time.time() - t0 < timeout:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.01)
    raise SystemExit(f"timed out: {script}")


def summary(ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=10, method="inclusive")[-1] if len(ms) > 1 else ms[0]
    return f"{statistics.median(ms):.0f} | {q:.0f} | {max(ms):.0f}"


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("index", type=Path)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--cores", type=int, default=2, help="CPU cores the server is pinned to (taskset)")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, help="also write the table here (Markdown)")
    args = ap.parse_args()

    import polars as pl

    ids = pl.read_parquet(args.index / "papers.parquet", columns=["paper_id"])["paper_id"].to_list()
    papers = random.Random(args.seed).sample(ids, args.runs)
    t_start = time.time()
    proc, url = start(args.index, args.cores, Path(tempfile.mkdtemp(prefix="graft-surveys-")))
    startup = time.time() - t_start
    driver = browser()
    try:
        driver.get(url)  # the page's own files into the browser cache, as any visit after the first
        wait(driver, "return document.getElementById('index-name').textContent")
        paint, recentre, api = [], [], []
        for pid in papers:
            driver.get(f"{url}?paper={urllib.parse.quote(pid)}&k={args.k}")
            wait(driver, "return window.graft.ready >= 1")
            paint.append(driver.execute_script("return window.graft.paintedAt"))
        # re-centre: on the current view's second result, from the click to the new graph's first frame
        driver.get(f"{url}?paper={urllib.parse.quote(papers[0])}&k={args.k}")
        wait(driver, "return window.graft.ready >= 1")
        for n in range(args.runs):
            target = driver.execute_script("return graftCy.nodes('[centre = 0]').map(x => x.id())[1]")
            driver.execute_script("document.querySelector('#recentre').dataset.paper = arguments[0];"
                                  "document.querySelector('#recentre').hidden = false;", target)
            driver.execute_script("window.__t = performance.now(); document.getElementById('recentre').click();")
            wait(driver, f"return window.graft.ready >= {n + 2} && window.graft.centre === {json.dumps(target)}")
            recentre.append(driver.execute_script("return window.graft.paintedAt - window.__t"))
        for pid in papers:  # the JSON answer alone, for comparison
            t0 = time.perf_counter()
            with urllib.request.urlopen(f"{url}api/graph?paper={urllib.parse.quote(pid)}&k={args.k}") as res:
                res.read()
            api.append(1000 * (time.perf_counter() - t0))
    finally:
        driver.quit()
        proc.terminate()
        proc.wait(timeout=60)
    rows = [f"| first paint (navigation → graph drawn) | {summary(paint)} |",
            f"| re-centre (click → new graph drawn) | {summary(recentre)} |",
            f"| /api/graph answer alone | {summary(api)} |"]
    table = "\n".join([f"index {args.index} · {len(ids):,} papers · k = {args.k} · {args.runs} runs · server pinned "
                       f"to {args.cores} cores · graph teacher · server start (index loaded, teacher warm) "
                       f"{startup:.1f} s", "",
                       "| what | median ms | p90 ms | max ms |", "|---|---:|---:|---:|", *rows])
    print(table)
    if args.out:
        args.out.write_text(table + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
