"""The queue engine: one :class:`DistributedQueue` made of small parts, each in its own module."""
