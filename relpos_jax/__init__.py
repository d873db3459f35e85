"""relpos-jax: positional encodings in Transformers, and how they extrapolate."""
