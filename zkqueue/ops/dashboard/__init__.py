"""``zkqueue dashboard``: a web page of the queues, job queues and flows under a root (Flask; every asset ships in
the package, nothing is fetched from the internet). :func:`~zkqueue.ops.dashboard.app.create_app` builds it."""

from zkqueue._extras import require

require("flask", what="zkqueue's web dashboard")
