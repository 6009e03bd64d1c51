"""Benchmarks of quasar_redis against its peers on PyPI (``python3 benchmarks/run.py``)."""
