"""Progress reporting and per-stage timing/peak-memory measurement for long commands."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

Advance = Callable[[int], None]


def current_rss_bytes() -> int:
    """Resident set size of this process (Linux /proc; falls back to the peak from getrusage)."""
    try:
        with open(f"/proc/{os.getpid()}/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:  # pragma: no cover - non-Linux
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


class _PeakSampler:
    """Samples RSS in a background thread; `peak` is the largest value seen."""

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.peak = current_rss_bytes()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak = max(self.peak, current_rss_bytes())

    def __enter__(self) -> _PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, current_rss_bytes())


@dataclass
class StageRecord:
    name: str
    seconds: float
    peak_rss_bytes: int


@dataclass
class Reporter:
    """Shows one progress bar per stage (rich) unless quiet, and records each stage's wall time and
    peak resident memory."""

    quiet: bool = False
    records: list[StageRecord] = field(default_factory=list)

    @contextmanager
    def stage(self, name: str, total: int | None = None, unit: str = "items") -> Iterator[Advance]:
        """Run one stage: yields `advance(n)`; records time and peak RSS when the block ends."""
        t0 = time.perf_counter()
        with _PeakSampler() as sampler:
            if self.quiet:
                yield lambda n: None
            else:
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    SpinnerColumn,
                    TextColumn,
                    TimeElapsedColumn,
                    TimeRemainingColumn,
                )

                columns = [SpinnerColumn(), TextColumn(f"[bold]{name:<12}"), BarColumn(),
                           MofNCompleteColumn(), TextColumn(unit), TimeElapsedColumn(),
                           TextColumn("eta"), TimeRemainingColumn()]
                with Progress(*columns, transient=False) as bar:
                    task = bar.add_task(name, total=total)
                    yield lambda n: bar.advance(task, n)
                    if total is not None:
                        bar.update(task, completed=total)
        self.records.append(StageRecord(name, time.perf_counter() - t0, sampler.peak))

    def timings(self) -> dict[str, float]:
        return {r.name: r.seconds for r in self.records}

    def peaks(self) -> dict[str, int]:
        return {r.name: r.peak_rss_bytes for r in self.records}


@contextmanager
def hf_progress_bars(enabled: bool) -> Iterator[None]:
    """Turn transformers' own tqdm bars (weight loading, shard writing) off inside the block; GRAFT
    shows its own progress."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    (hf_logging.enable_progress_bar if enabled else hf_logging.disable_progress_bar)()
    try:
        yield
    finally:
        (hf_logging.enable_progress_bar if was else hf_logging.disable_progress_bar)()
