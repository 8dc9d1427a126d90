"""The Typer app: one module per command (cli/*_cmd.py) over cli/common.py; `main` is `graft`."""

from __future__ import annotations

import errno
import signal
import sys

import typer
from rich.text import Text

from cli.build_cmd import build, print_build_summary
from cli.common import clip, err, safe, setup_env
from cli.demo_cmd import demo
from cli.eval_cmd import eval_app
from cli.export_cmd import export
from cli.import_cmd import import_
from cli.info_cmd import info
from cli.query_cmd import query
from cli.serve_cmd import serve
from cli.survey_cmd import survey
from cli.train_cmd import train

__all__ = ["app", "main", "print_build_summary"]

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="GRAFT: typed facet graphs over papers, facet-attributed retrieval and surveys.")


@app.callback()
def _setup() -> None:
    setup_env()


app.command("build")(build)
app.command("query")(query)
app.command("info")(info)
app.command("export")(export)
app.command("import")(import_)
app.command("demo")(demo)
app.command("train")(train)
app.command("survey")(survey)
app.command("serve")(serve)
app.add_typer(eval_app, name="eval")


#: Errors of the machine rather than of GRAFT (a read-only or full disk, no permission): one line, not a traceback.
_ENVIRONMENT_ERRNOS = {errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT}


def _stop(signum: int, frame: object) -> None:
    """SIGINT and SIGTERM (what `kill` and job schedulers send) stop a command the same way, as an
    exception: its cleanups run (temporary files go, a survey keeps its old files, a build its old
    index) and a training run saves nothing half-made."""
    _stopped.append(signal.Signals(signum))
    raise KeyboardInterrupt


_stopped: list[signal.Signals] = []


def main() -> None:
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _stop)
    try:
        app(prog_name="graft")
    except (SystemExit, KeyboardInterrupt) as exc:
        if _stopped and (isinstance(exc, KeyboardInterrupt) or exc.code == 130):  # 130: Typer's exit for one
            err.print(f"stopped ({_stopped[0].name}): what was finished is kept; run the same command again to "
                      "go on (a build resumes from INDEX/cache, training from its last checkpoint, an eval run "
                      "reuses its finished run files)", highlight=False, soft_wrap=True)
            sys.exit(128 + _stopped[0].value)
        raise
    except OSError as exc:
        if exc.errno not in _ENVIRONMENT_ERRNOS:
            raise
        where = f"{exc.filename}: " if exc.filename else ""
        err.print(Text.assemble(("error:", "bold red"), " ", safe(clip(f"{where}{exc.strerror}"))), highlight=False,
                  soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

