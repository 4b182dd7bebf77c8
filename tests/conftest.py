"""Every test gets a real ZooKeeper: see zkqueue/pytest_plugin.py for the fixtures."""

pytest_plugins = ["zkqueue.server.pytest_plugin"]
