"""The benchmark harness: ``python bench/run.py`` (see docs/explanation/performance.md)."""
