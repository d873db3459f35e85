"""`python -m relpos_jax.positions`: a summary of every registered scheme.

Prints, per scheme, the hooks it implements, its config keys with defaults, and
the first line of its docstring; then a few values of each scheme's math at
small positions, so a reader can see what the encodings look like.
"""

import jax.numpy as jnp
import numpy as np

from relpos_jax import positions
from relpos_jax.positions import base
from relpos_jax.positions import sinusoidal
from relpos_jax.positions import t5


def main() -> None:
  """Prints the registry table and a glimpse of the sinusoid and T5 buckets."""
  print("| scheme | hooks | config keys (defaults) | what |")
  print("|---|---|---|---|")
  for name, cls in positions.SCHEMES.items():
    hooks = [h for h in base.EMBED_HOOKS + base.ATTENTION_HOOKS if cls.implements(h)]
    doc = (cls.__doc__ or "").strip().splitlines()[0]
    print(f"| {name} | {', '.join(hooks) or '-'} | {positions.config_fields(name) or '-'} | {doc} |")
  np.set_printoptions(precision=3, suppress=True)
  print("\nsinusoidal_encoding(pos=0..4, dim=8):")
  print(np.asarray(sinusoidal.sinusoidal_encoding(jnp.arange(5), 8)))
  rel = jnp.array([-200, -64, -16, -8, -1, 0, 1, 8, 16, 64, 200])
  print("\nT5 buckets (32, 128) for key - query =", np.asarray(rel))
  print("  bidirectional: ", np.asarray(t5.relative_position_bucket(rel, bidirectional=True)))
  print("  unidirectional:", np.asarray(t5.relative_position_bucket(rel, bidirectional=False)))


if __name__ == "__main__":
  main()
