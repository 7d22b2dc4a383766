"""Benchmarks of fredica against Huey and Celery, measured on the same machine in the same run.

Run `python -m bench` from the repository root (`make bench`); see `bench.harness`.
"""
