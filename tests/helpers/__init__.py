"""Shared test helpers, imported as `helpers.<module>` (pyproject's pytest `pythonpath` puts
tests/ on the path): attention builds and float64 references, data release fixtures in the
official formats, training and study helpers, and the repository's paths."""
