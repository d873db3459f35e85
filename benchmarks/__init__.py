"""Speed and memory benchmarks (`make bench`, benchmarks/run.py); see docs/performance.md."""
