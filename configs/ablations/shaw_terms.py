"""Shaw's two terms on and off: relative keys (a^K, the logit term) and values (a^V).

Mirrors Shaw et al. 2018, Table 3 (relative position representations in the keys
and/or the values), where the key term alone matched both on translation; here,
extrapolation on the copy task (train lengths 1-20, eval to 80). With both off
the attention has no position information at all (NoPE inside attention).

  python train.py --config configs/ablations/shaw_terms.py --workdir runs/shaw_terms \
      --results_dir results/shaw_terms

Expected runtime: ~20 min per 3-seed run at the ablation size (2,500 steps of 64),
measured on 2 CPU cores shared with other jobs; less alone (4 runs).
Arguments: those of configs/default.py.
"""

import itertools

import ml_collections

from configs import default as _DEFAULT




def get_config(arg=None) -> ml_collections.ConfigDict:
  """configs/default.py with the Shaw scheme and 3 seeds (the user's `arg` wins)."""
  return _DEFAULT.get_config(f"scheme=shaw,num_seeds=3,ablation,{arg or ''}")


def get_sweep() -> list[dict]:
  """The 2 × 2 grid of use_keys × use_values."""
  return [{"model.position.use_keys": keys, "model.position.use_values": values}
          for keys, values in itertools.product((True, False), repeat=2)]
