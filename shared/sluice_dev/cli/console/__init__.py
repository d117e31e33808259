"""``sluice console``: a small web UI on localhost over the public and operator APIs (docs/console.md).

Modules: ``render`` (HTML, pure), ``backend`` (the port, watched queues, sparkline history),
``server`` (routes, CSRF checks, the HTTP server), ``static/`` (one script, one stylesheet).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from sluice_dev.cli.target import Target
from sluice_dev.local import api_server

if TYPE_CHECKING:
    from sluice_dev.cli.console.server import Console

DEFAULT_PORT = 8470
LOCAL_OPERATOR = api_server.LOCAL_OPERATOR  # `sluice dev` names it operator when the template names none


def build(target: Target, api: str | None, port: int, queues: tuple[str, ...]) -> Console:
    from sluice.core.models import validate_queue_name
    from sluice_dev.cli.console.backend import Watched
    from sluice_dev.cli.console.server import Console

    # No --queue: every queue the operator API lists (GET /v1/admin/queues), locally and deployed.
    watched = Watched({validate_queue_name(q) for q in queues}, every=not queues)
    # A deployment: every call SigV4-signed here, with the usual AWS credentials; the local stack:
    # no IAM, the operator routes take the caller from a header.
    client = target.operator_client(api, max_attempts=2)
    where = api or target.api_url or target.env.get("SLUICE_API_URL") or f"local stack ({client.api_url})"
    console = Console(client, where, port, watched)
    if not (api or target.api_url or target.env.get("SLUICE_API_URL")):  # inside sluice dev (issue 32)
        from sluice_dev.cli.console.scenario import on_stack

        console.scenarios = on_stack(target.local)  # on its servers; None while it is not running
    return console


@click.command("console")
@click.option("--port", type=int, default=DEFAULT_PORT, show_default=True,
              help="Port on 127.0.0.1 (0: any free port).")
@click.option("--api", "api", default=None, metavar="URL",
              help="A gateway to operate (SigV4-signed with your AWS credentials). Default: --api-url / "
                   "SLUICE_API_URL, else the local stack.")
@click.option("--queue", "queues", multiple=True, metavar="NAME",
              help="Show only this queue (repeatable); default: every queue GET /v1/admin/queues lists. "
                   "More can be added in the page.")
@click.pass_obj
def console(target: Target, port: int, api: str | None, queues: tuple[str, ...]) -> None:
    """Serve a web console on localhost: queues, jobs, dead jobs, schedules."""
    from sluice_dev.cli.console.server import serve

    app = build(target, api, port, queues)
    server = serve(app)
    click.echo(f"sluice console on http://127.0.0.1:{app.port}/ for {app.where} (Ctrl-C stops it)")
    # The one way in (docs/console.md, Safety): the link's token becomes the browser's cookie.
    click.echo(f"open this link once to log in: {app.login_url()}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


COMMANDS = [console]
