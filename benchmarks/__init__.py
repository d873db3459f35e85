"""Speed and memory benchmarks (`make bench`); see benchmarks/schemes.py."""
