"""Surveys written from the explorer: one at a time, in a background thread, each into its own folder
of the surveys folder (`DIR/<name>/survey.md, references.bib, survey.json`, what `graft survey INDEX
TOPIC --out DIR/<name>` writes), and read back as HTML with every citation linked to its paper."""

from __future__ import annotations

import json
import queue
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from graft.errors import GraftError
from graft.progress import Reporter

#: A survey's folder name: lower-case letters, digits and dashes (what `slug` makes).
NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,79}$")
#: Surveys waiting behind the one being written, at most.
MAX_WAITING = 4
_CITE = re.compile(r"\[(\d{1,4})\]")


def slug(topic: str) -> str:
    """The folder name of a topic: its words, lower-case, joined by dashes (at most 60 characters)."""
    words = re.findall(r"[a-z0-9]+", topic.lower())
    name = "-".join(words)[:60].strip("-")
    return name or "survey"


@dataclass
class Job:
    """One survey asked for from the page."""

    name: str
    topic: str
    state: str = "queued"  # queued, running, done, failed
    stage: str | None = None
    done: int = 0
    total: int | None = None
    error: str | None = None
    started: float | None = None
    finished: float | None = None
    stages: list[str] = field(default_factory=list)


class JobReporter(Reporter):
    """A quiet `Reporter` that keeps a job's current stage and its progress."""

    def __init__(self, job: Job) -> None:
        super().__init__(quiet=True)
        self.job = job

    @contextmanager
    def stage(self, name: str, total: int | None = None, unit: str = "items") -> Iterator[Callable[[int], None]]:
        job = self.job
        job.stage, job.done, job.total = name, 0, total
        job.stages.append(name)

        def advance(n: int) -> None:
            job.done += n

        with super().stage(name, total, unit):
            yield advance


class Surveys:
    """The surveys folder and its one writer thread.

    Args:
        folder: where surveys are written (made on the first one).
        write: `write(topic, out_dir, reporter)` writes one survey (`Explorer.write_survey`).
        check_topic: `check_topic(topic)` -> the topic as written, or raises GraftError.
    """

    def __init__(self, folder: Path, write: Callable[[str, Path, Reporter], Any],
                 check_topic: Callable[[str], str]) -> None:
        self.folder = Path(folder).resolve()
        self._write, self._check = write, check_topic
        self._jobs: dict[str, Job] = {}
        self._queue: queue.Queue[Job] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def start(self, topic: Any) -> Job:
        """Queue a survey of `topic`; returns its job (a new folder name, never an existing one's).

        Raises:
            GraftError: a bad topic, or too many surveys waiting.
        """
        if not isinstance(topic, str):
            raise GraftError("the topic must be a text, such as \"neural machine translation\"")
        topic = self._check(topic)
        with self._lock:
            waiting = sum(j.state in ("queued", "running") for j in self._jobs.values())
            if waiting > MAX_WAITING:
                raise GraftError(f"{waiting} surveys are already being written or waiting; start this one when "
                                 "they are done")
            base = slug(topic)
            name, n = base, 1
            while name in self._jobs or (self.folder / name).exists():
                n += 1
                name = f"{base[:56].rstrip('-')}-{n}"
            job = self._jobs[name] = Job(name=name, topic=topic)
            self._queue.put(job)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="graft-surveys", daemon=True)
                self._thread.start()
        return job

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            job.state, job.started = "running", time.time()
            try:
                self._write(job.topic, self.folder / job.name, JobReporter(job))
                job.state = "done"
            except Exception as exc:  # a failed survey is reported on the page, the server goes on
                job.state, job.error = "failed", (str(exc) if isinstance(exc, GraftError | ValueError)
                                                   else f"{type(exc).__name__}: {exc}")
            job.finished = time.time()

    def folder_of(self, name: str) -> Path:
        """The folder of survey `name`, inside the surveys folder.

        Raises:
            GraftError: a name that is not a survey folder name (no path may leave the folder).
        """
        if not isinstance(name, str) or not NAME.match(name):
            raise GraftError(f"no survey is named {name[:80]!r}" if isinstance(name, str) else "no such survey")
        path = (self.folder / name).resolve()
        if path.parent != self.folder:
            raise GraftError(f"no survey is named {name!r}")
        return path

    def listing(self) -> list[dict[str, Any]]:
        """The surveys of the folder (written, from survey.json) and those asked for since the server
        started, newest first."""
        out: dict[str, dict[str, Any]] = {}
        if self.folder.is_dir():
            for p in self.folder.iterdir():
                if NAME.match(p.name) and (p / "survey.json").is_file():
                    out[p.name] = {"name": p.name, "topic": _topic_of(p), "state": "done",
                                   "finished": p.stat().st_mtime}
        with self._lock:
            for job in self._jobs.values():
                out[job.name] = {**out.get(job.name, {}), **self.status_of(job)}
        return sorted(out.values(), key=lambda s: -(s.get("finished") or s.get("started") or time.time()))

    @staticmethod
    def status_of(job: Job) -> dict[str, Any]:
        return asdict(job)

    def status(self, name: str) -> dict[str, Any]:
        """One survey: its job's state and progress, and once written, its HTML (citations linked to
        their papers), references (number -> paper id) and title.

        Raises:
            GraftError: no such survey.
        """
        folder = self.folder_of(name)
        job = self._jobs.get(name)
        out: dict[str, Any] = self.status_of(job) if job is not None else {"name": name, "state": "done"}
        if out["state"] == "done":
            if not (folder / "survey.md").is_file() or not (folder / "survey.json").is_file():
                raise GraftError(f"no survey is named {name!r}")
            record = json.loads((folder / "survey.json").read_text(encoding="utf-8"))
            refs = {int(r["number"]): str(r["paper_id"]) for r in record.get("references", [])}
            out.update(topic=record.get("topic"), title=record.get("title"), references=refs,
                       html=render_survey((folder / "survey.md").read_text(encoding="utf-8"), refs))
        return out

    def bibtex(self, name: str) -> Path:
        """references.bib of a written survey.

        Raises:
            GraftError: no such survey, or not written yet.
        """
        path = self.folder_of(name) / "references.bib"
        if not path.is_file():
            raise GraftError(f"survey {name!r} has no references.bib (not written yet, or no such survey)")
        return path


def _topic_of(folder: Path) -> str | None:
    try:
        return json.loads((folder / "survey.json").read_text(encoding="utf-8")).get("topic")
    except (OSError, ValueError):
        return None


def render_survey(markdown: str, references: dict[int, str]) -> str:
    """survey.md as HTML: Markdown with raw HTML shown as text (never passed through), each `[n]`
    citation a link to its paper (`<a class="cite" data-paper="ID">`)."""
    from html import escape

    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    html = md.render(markdown)

    def link(m: re.Match) -> str:
        pid = references.get(int(m.group(1)))
        if pid is None:
            return m.group(0)
        return f'<a href="#" class="cite" data-paper="{escape(pid, quote=True)}">[{m.group(1)}]</a>'

    # citations sit in text, never inside a tag's attributes: only the text between tags is rewritten
    parts = re.split(r"(<[^>]*>)", html)
    return "".join(p if p.startswith("<") else _CITE.sub(link, p) for p in parts)
