"""How fast `graft serve`'s page answers, measured in headless Chromium: first paint of a paper's
graph (from the navigation to the first frame drawn with the graph, a fresh page load each time)
and re-centre (from the click on "Re-centre on this paper" to the first frame of the new graph).
The server runs the graph teacher and is pinned to the given number of cores.

    python -m experiments.serve_latency INDEX [--runs 10] [--cores 2] [--k 20] [--out results.md]

Needs Debian's chromium and chromium-driver and selenium (as the browser test).
"""

from __future__ import annotations

import json
import random
import statistics
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

from experiments.browser import open_browser, page_url, start_server, token_of, wait_for
from experiments.common import parser


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
    proc, url = start_server(args.index, Path(tempfile.mkdtemp(prefix="graft-surveys-")), cores=args.cores,
                             timeout=600)
    startup = time.time() - t_start
    driver = open_browser()
    try:
        driver.get(url)  # the page's own files into the browser cache, as any visit after the first
        wait_for(driver, "return document.getElementById('index-name').textContent")
        paint, recentre, api = [], [], []
        for pid in papers:
            driver.get(page_url(url, paper=pid, k=args.k))
            wait_for(driver, "return window.graft.ready >= 1")
            paint.append(driver.execute_script("return window.graft.paintedAt"))
        # re-centre: on the current view's second result, from the click to the new graph's first frame
        driver.get(page_url(url, paper=papers[0], k=args.k))
        wait_for(driver, "return window.graft.ready >= 1")
        for n in range(args.runs):
            target = driver.execute_script("return graftCy.nodes('[centre = 0]').map(x => x.id())[1]")
            driver.execute_script("document.querySelector('#recentre').dataset.paper = arguments[0];"
                                  "document.querySelector('#recentre').hidden = false;", target)
            driver.execute_script("window.__t = performance.now(); document.getElementById('recentre').click();")
            wait_for(driver, f"return window.graft.ready >= {n + 2} && window.graft.centre === {json.dumps(target)}")
            recentre.append(driver.execute_script("return window.graft.paintedAt - window.__t"))
        for pid in papers:  # the JSON answer alone, for comparison
            t0 = time.perf_counter()
            req = urllib.request.Request(f"{url.split('?')[0]}api/graph?paper={urllib.parse.quote(pid)}&k={args.k}",
                                         headers={"X-Graft-Token": token_of(url)})
            with urllib.request.urlopen(req) as res:
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
