"""NoPE: no positional information at all.

Kazemnejad et al. 2023, "The Impact of Positional Encoding on Length
Generalization in Transformers" (NeurIPS): a causal decoder can infer positions
from its mask alone. In a bidirectional encoder NoPE makes the model a bag of
words; that is the point of the ablation.
"""

from relpos_jax.positions import base


class NoPE(base.PositionScheme):
  """Every hook is the base class's no-op."""
