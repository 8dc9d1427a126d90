"""`graft serve`: the local web explorer of an index (registered by cli/app.py)."""

from __future__ import annotations

from pathlib import Path

import typer

from cli.common import console, fail


def serve(
    index: Path = typer.Argument(..., help="Index directory (from `graft build`); read, never written."),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="Port to listen on (0: any free port)."),
    host: str = typer.Option("127.0.0.1", "--host",
                             help="Address to listen on; 127.0.0.1 keeps the explorer on this machine."),
    surveys: Path = typer.Option(Path("surveys"), "--surveys",
                                 help="Folder the page's surveys are written to, one folder each (as `graft "
                                      "survey INDEX TOPIC --out SURVEYS/NAME`)."),
) -> None:
    """A local web explorer of the facet graph: find a paper, see its related papers and why, write surveys."""
    import socket

    import uvicorn

    from graft.errors import GraftError
    from graft.web.app import create_app

    try:
        console.print(f"loading {index} …", highlight=False)
        app = create_app(index, surveys)
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            raise GraftError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --port") from None
    except GraftError as exc:
        fail(exc)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    console.print(f"GRAFT explorer of {index}: http://{shown}:{bound}/  (surveys in {surveys.resolve()}; "
                  "Ctrl-C stops it)", highlight=False, soft_wrap=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # `graft`'s own handler turns SIGINT into this: stop as uvicorn would
        pass
    finally:
        sock.close()
    console.print("stopped", highlight=False)
