"""The dashboard's Flask application and how it is served."""

from __future__ import annotations

import logging
import secrets
from typing import Any

from flask import Flask

from zkqueue.ops.dashboard.data import DashboardData

log = logging.getLogger("zkqueue.ops.dashboard.app")


def create_app(client: Any, *, root: str = "/queues", allow_actions: bool = False, auth_user: str = "") -> Flask:
    """The dashboard of the queues under ``root`` read through ``client``. Actions (retry dead jobs, purge dead
    letters, redrive quarantined items) are refused unless ``allow_actions``; they then run with ``client``'s
    credentials (``auth_user`` names them on the page). Every form carries a token of this app, so another site
    cannot post actions through a visitor's browser."""
    from zkqueue.ops.dashboard.views import views  # noqa: PLC0415

    app = Flask(__name__, static_folder="static", template_folder="templates")
    app.config.update(ZKQ_DATA=DashboardData(client, root), ZKQ_ALLOW_ACTIONS=allow_actions,
                      ZKQ_AUTH_USER=auth_user, ZKQ_TOKEN=secrets.token_urlsafe(24))
    app.secret_key = secrets.token_hex(16)
    app.register_blueprint(views)
    return app


def run(app: Flask, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serve ``app`` until interrupted (werkzeug's threaded server; put a reverse proxy in front for more)."""
    from werkzeug.serving import make_server  # noqa: PLC0415

    server = make_server(host, port, app, threaded=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
