"""Reliability: many processes, crashes, damaged files, read-only disks, upgrades, hostile input.

Every scenario lives in `harness` at any size; the tests here run it small in CI, and
tools/bench_reliability.py runs it full size and prints its figures.
"""
