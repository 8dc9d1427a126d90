"""A screenshot of `graft serve`'s page (docs/serve.png): the view around one paper in headless
Chromium at 1400 x 900, after its graph is drawn and a result's card is open. Prints the view's
size, its label boxes that overlap (none expected), the smallest label's font size on screen, and
the time to the first frame of the graph.

    python -m experiments.serve_screenshot INDEX PAPER [--k 20] [--select N] [--layout map|timeline]
        [--out docs/serve.png]

Needs Debian's chromium and chromium-driver and selenium (as the browser test).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from experiments.browser import open_browser, page_url, start_server, wait_for
from experiments.common import parser

#: Each paper's rendered label box and on-screen font size.
LABELS = """return graftCy.nodes().not('.axis').map(n => {
  const b = n.renderedBoundingBox({includeLabels: true, includeNodes: false});
  return {id: n.id(), x1: b.x1, y1: b.y1, x2: b.x2, y2: b.y2, px: parseFloat(n.style('font-size')) * graftCy.zoom()};
})"""


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("index", type=Path)
    ap.add_argument("paper")
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--select", type=int, default=1, help="open the card of this result (rank), 0: the centre's")
    ap.add_argument("--layout", choices=("map", "timeline"), default="map")
    ap.add_argument("--out", type=Path, default=Path("docs/serve.png"))
    args = ap.parse_args()
    proc, url = start_server(args.index, Path(tempfile.mkdtemp(prefix="graft-surveys-")))
    driver = open_browser()
    try:
        params = {"paper": args.paper, "k": args.k, **({"layout": "timeline"} if args.layout == "timeline" else {})}
        driver.get(page_url(url, **params))
        wait_for(driver, "return window.graft.ready >= 1", poll=0.05)
        if args.select:
            driver.execute_script(
                "const b = document.querySelectorAll('#hit-list li button')[arguments[0] - 1]; if (b) b.click();",
                args.select)
            wait_for(driver, "return document.querySelector('#card-why h3') !== null", poll=0.05)
        time.sleep(0.5)
        boxes = driver.execute_script(LABELS)
        overlaps = [(a["id"], b["id"]) for i, a in enumerate(boxes) for b in boxes[i + 1:]
                    if min(a["x2"], b["x2"]) > max(a["x1"], b["x1"]) and min(a["y2"], b["y2"]) > max(a["y1"], b["y1"])]
        timing = driver.execute_script("return window.graft.timings[0]")
        args.out.parent.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(args.out))
        print("| papers shown | label overlaps | smallest label (px) | first frame (ms) |")
        print("|---|---|---|---|")
        print(f"| {len(boxes)} | {len(overlaps)} | {min(b['px'] for b in boxes):.1f} | {timing:.0f} |")
        print(f"screenshot: {args.out}")
    finally:
        driver.quit()
        proc.terminate()
        proc.wait(timeout=60)


if __name__ == "__main__":
    main()
