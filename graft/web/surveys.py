"""Surveys written from the explorer: one at a time, in a background thread, each into its own folder
of the surveys folder (`DIR/<name>/survey.md, references.bib, survey.json`, what `graft survey INDEX
TOPIC --out DIR/<name>` writes), and read back as HTML with every citation linked to its paper.

A survey's files are read through no symbolic link: neither its folder nor the file may be one (a
`references.bib` linked to `~/.ssh/id_rsa` is refused, not served), and only plain files are read."""

from __future__ import annotations

import errno
import json
import os
import queue
import re
import stat
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
#: Largest survey file read, in bytes (a survey.md is tens of kilobytes).
MAX_FILE_BYTES = 64 * 2**20
#: Opening a path relative to an open folder, refusing a link as the last component (POSIX).
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_AT = _NOFOLLOW != 0 and os.open in os.supports_dir_fd and os.stat in os.supports_dir_fd


class NoSuchSurvey(GraftError):
    """A survey name the surveys folder does not hold (or a name no survey may have)."""


class Refused(GraftError):
    """A survey's folder or file that is a symbolic link, or not a plain file: never read."""


class Unreadable(GraftError):
    """A survey's file that is there but cannot be read as what `graft survey` writes."""


class QueueFull(GraftError):
    """Too many surveys being written or waiting to start another."""


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
            QueueFull: too many surveys being written or waiting (a conflict: HTTP 409).
            GraftError: a bad topic.
        """
        if not isinstance(topic, str):
            raise GraftError("the topic must be a text, such as \"neural machine translation\"")
        topic = self._check(topic)
        with self._lock:
            waiting = sum(j.state in ("queued", "running") for j in self._jobs.values())
            if waiting > MAX_WAITING:
                raise QueueFull(f"{waiting} surveys are already being written or waiting; start this one when "
                                "they are done")
            base = slug(topic)
            name, n = base, 1
            # lexists: a link of that name, even one pointing nowhere, is never written through
            while name in self._jobs or os.path.lexists(self.folder / name):
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
        """The folder of survey `name`, inside the surveys folder (not checked to exist).

        Raises:
            NoSuchSurvey: a name that is not a survey folder name (no path may leave the folder).
        """
        if not isinstance(name, str) or not NAME.match(name):
            raise NoSuchSurvey(f"no survey is named {name[:80]!r}" if isinstance(name, str) else "no such survey")
        return self.folder / name

    def read(self, name: str, filename: str) -> bytes | None:
        """The bytes of `filename` in survey `name`'s folder, or None when the folder or the file is
        not there. Neither may be a symbolic link (refused, however the link is made or where it
        points), the file must be a plain file (not a FIFO or a device) of at most `MAX_FILE_BYTES`.
        On POSIX the folder and the file are opened with O_NOFOLLOW, relative to the open surveys
        folder, so a link put in place between a check and the read is refused too.

        Raises:
            NoSuchSurvey: a bad name. Refused: a link or not a plain file. Unreadable: too large or unreadable.
        """
        folder = self.folder_of(name)
        if not _AT:
            return self._read_checked(folder, filename)
        flags = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        try:
            top = os.open(self.folder, flags | getattr(os, "O_DIRECTORY", 0))
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise Unreadable(f"the surveys folder {self.folder} cannot be read ({exc.strerror})") from None
        try:
            try:
                sub = os.open(name, flags | getattr(os, "O_DIRECTORY", 0), dir_fd=top)
            except OSError as exc:
                return self._missing_or_refused(exc, name, name, top)
            try:
                try:
                    fd = os.open(filename, flags | getattr(os, "O_NONBLOCK", 0), dir_fd=sub)
                except OSError as exc:
                    return self._missing_or_refused(exc, f"{name}/{filename}", filename, sub)
                with os.fdopen(fd, "rb") as f:
                    return self._read_open(f, name, filename)
            finally:
                os.close(sub)
        finally:
            os.close(top)

    @staticmethod
    def _missing_or_refused(exc: OSError, shown: str, path: str, dir_fd: int) -> None:
        if isinstance(exc, FileNotFoundError):
            return None
        try:
            st = os.stat(path, dir_fd=dir_fd, follow_symlinks=False)
        except OSError:
            st = None
        if exc.errno == errno.ELOOP or (st is not None and stat.S_ISLNK(st.st_mode)):
            raise Refused(f"{shown} in the surveys folder is a symbolic link: the explorer serves no file "
                          "through a link") from None
        if exc.errno == errno.ENOTDIR:
            return None  # a plain file where a survey's folder would be: no such survey
        raise Unreadable(f"{shown} in the surveys folder cannot be read ({exc.strerror})") from None

    def _read_checked(self, folder: Path, filename: str) -> bytes | None:
        """`read` where files cannot be opened relative to a folder without following links: each
        part checked with lstat before the file is opened."""
        for part in (folder, folder / filename):
            try:
                st = part.lstat()
            except FileNotFoundError:
                return None
            if stat.S_ISLNK(st.st_mode):
                raise Refused(f"{part.relative_to(self.folder)} in the surveys folder is a symbolic link: the "
                              "explorer serves no file through a link")
        with (folder / filename).open("rb") as f:
            return self._read_open(f, folder.name, filename)

    @staticmethod
    def _read_open(f: Any, name: str, filename: str) -> bytes:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"{name}/{filename} in the surveys folder is not a plain file: not served")
        if st.st_size > MAX_FILE_BYTES:
            raise Unreadable(f"{name}/{filename} is {st.st_size:,} bytes, over the {MAX_FILE_BYTES:,} the "
                             "explorer reads")
        data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise Unreadable(f"{name}/{filename} is over the {MAX_FILE_BYTES:,} bytes the explorer reads")
        return data

    def record(self, name: str) -> dict[str, Any] | None:
        """survey.json of survey `name`, or None when there is none.

        Raises:
            Unreadable: it is not a JSON object. Refused, NoSuchSurvey: as `read`.
        """
        raw = self.read(name, "survey.json")
        if raw is None:
            return None
        try:
            record = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise Unreadable(f"survey {name!r} cannot be shown: its survey.json is not valid JSON "
                             f"({str(exc)[:120]})") from None
        if not isinstance(record, dict):
            raise Unreadable(f"survey {name!r} cannot be shown: its survey.json is not a JSON object")
        return record

    def listing(self) -> list[dict[str, Any]]:
        """The surveys of the folder (written, from survey.json; none through a link) and those asked
        for since the server started, newest first."""
        out: dict[str, dict[str, Any]] = {}
        if self.folder.is_dir():
            for p in self.folder.iterdir():
                if not NAME.match(p.name) or p.is_symlink() or not p.is_dir():
                    continue
                try:
                    record = self.record(p.name)
                except Refused:
                    continue
                except Unreadable:
                    record = {}  # listed: opening it says what is wrong
                if record is None:
                    continue
                topic = record.get("topic")
                out[p.name] = {"name": p.name, "topic": topic if isinstance(topic, str) else None, "state": "done",
                               "finished": p.lstat().st_mtime}
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
            NoSuchSurvey: no such survey. Refused: its folder or a file is a link.
            Unreadable: its survey.json or survey.md is not what `graft survey` writes.
        """
        self.folder_of(name)
        job = self._jobs.get(name)
        out: dict[str, Any] = self.status_of(job) if job is not None else {"name": name, "state": "done"}
        if out["state"] == "done":
            record, md = self.record(name), self.read(name, "survey.md")
            if record is None or md is None:
                raise NoSuchSurvey(f"no survey is named {name!r}")
            try:
                refs = {int(r["number"]): str(r["paper_id"]) for r in record.get("references", [])}
                text = md.decode("utf-8")
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                raise Unreadable(f"survey {name!r} cannot be shown: its survey.json or survey.md is not what "
                                 f"`graft survey` writes ({type(exc).__name__}: {str(exc)[:120]})") from None
            title, topic = record.get("title"), record.get("topic")
            out.update(topic=topic if isinstance(topic, str) else None,
                       title=title if isinstance(title, str) else None, references=refs,
                       html=render_survey(text, refs))
        return out

    def bibtex(self, name: str) -> bytes:
        """references.bib of a written survey.

        Raises:
            NoSuchSurvey: no such survey, or not written yet. Refused, Unreadable: as `read`.
        """
        data = self.read(name, "references.bib")
        if data is None:
            raise NoSuchSurvey(f"survey {name!r} has no references.bib (not written yet, or no such survey)")
        return data


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
