"""Server: an embedded ZooKeeper ensemble from the pyspark wheel's jars, and the test kit built on it (pytest
fixtures, session expiry, a TCP fault proxy). Kept light: importable before kazoo is installed."""
