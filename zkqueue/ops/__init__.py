"""Operations: the ``zkqueue`` command line, read-only queue counts, and the demo behind ``make demo``."""
