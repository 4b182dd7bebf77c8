"""Formats: how items look in ZooKeeper. Curator's item framing, node names and serializers; pure, no I/O."""
