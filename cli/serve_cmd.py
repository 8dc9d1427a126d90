"""`graft serve`: the local web explorer of an index (registered by cli/app.py)."""

from __future__ import annotations

from pathlib import Path

import typer

from cli.common import console, err, fail


def serve(
    index: Path = typer.Argument(..., help="Index directory (from `graft build`); read, never written."),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="Port to listen on (0: any free port)."),
    host: str = typer.Option("127.0.0.1", "--host",
                             help="Address to listen on; 127.0.0.1 keeps the explorer on this machine. Any "
                                  "other (e.g. 0.0.0.0) opens it to the network, with a warning: anyone with "
                                  "its URL and token can read the index and write surveys, over plain HTTP."),
    surveys: Path = typer.Option(Path("surveys"), "--surveys",
                                 help="Folder the page's surveys are written to, one folder each (as `graft "
                                      "survey INDEX TOPIC --out SURVEYS/NAME`)."),
    token: str | None = typer.Option(None, "--token", envvar="GRAFT_SERVE_TOKEN", show_default=False,
                                     help="The secret every API request must carry (16-256 letters, digits, "
                                          "'-', '_', '.', '~'), for scripts and bookmarks that outlive one "
                                          "server; default: a new random one each start, printed in the URL. "
                                          "Prefer the environment variable: a command line is visible to "
                                          "other users of the machine."),
    allow_host: list[str] = typer.Option([], "--allow-host", metavar="NAME",
                                         help="Another name the page may be reached by (the Host header of a "
                                              "request), e.g. this machine's name on the network or a reverse "
                                              "proxy's; repeatable. localhost, 127.0.0.1, [::1] and --host "
                                              "are always accepted; any other name is refused."),
) -> None:
    """A local web explorer of the facet graph: find a paper, see its related papers and why, write surveys.

    It prints its URL with a per-server token (http://127.0.0.1:8765/?token=...): every API request,
    the page's included, must carry that token, come from the page's own origin and name this
    server in its Host header (see docs/security.md)."""
    import socket

    import uvicorn

    from graft.errors import GraftError
    from graft.web.app import create_app
    from graft.web.guard import allowed_hosts, check_token, is_loopback, is_wildcard, new_token

    try:
        token = new_token() if token is None else check_token(token)
    except ValueError as exc:
        fail(f"--token / GRAFT_SERVE_TOKEN: {exc}")
    hosts = allowed_hosts(host, allow_host)
    try:
        console.print(f"loading {index} …", highlight=False)
        app = create_app(index, surveys, token=token, hosts=hosts)
        sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
            sock.listen(2048)  # a request made as soon as the URL is printed waits, is not refused
        except OSError as exc:
            sock.close()
            raise GraftError(f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --port") from None
    except GraftError as exc:
        fail(exc)
    bound = sock.getsockname()[1]
    name = socket.gethostname() if is_wildcard(host) else host
    shown = f"[{name}]" if ":" in name else name
    if not is_loopback(host):
        err.print(f"warning: --host {host} is not a loopback address: the explorer is open to every machine that "
                  f"can reach this one on port {bound}. Anyone with its URL (which holds the token) can read the "
                  "whole index and write surveys, and plain HTTP carries the token and the index in clear. "
                  f"Prefer an SSH tunnel: keep --host 127.0.0.1 and run `ssh -L {bound}:127.0.0.1:{bound} "
                  "THIS-MACHINE` on the other one (docs/security.md).", style="yellow", highlight=False,
                  soft_wrap=True)
    console.print(f"GRAFT explorer of {index}: http://{shown}:{bound}/?token={token}  (surveys in "
                  f"{surveys.resolve()}; Ctrl-C stops it)", highlight=False, soft_wrap=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # `graft`'s own handler turns SIGINT into this: stop as uvicorn would
        pass
    finally:
        sock.close()
    console.print("stopped", highlight=False)
