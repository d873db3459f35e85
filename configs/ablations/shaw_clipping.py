"""Shaw's clipping distance k on the copy task; mirrors Shaw et al. 2018, Table 2.

Shaw et al. varied the clipping distance k ∈ {0, 1, 2, 4, 16, 64} on WMT En-De
(Table 2) and found BLEU flat for k >= 2. Here the question is extrapolation: a
model trained on lengths 1-20 and evaluated to 80, one run per k
(`max_relative_position=k`). k = 0 leaves one shared row (no relative
information); for k >= 20 no training distance is clipped, so longer test
sequences meet distances (and table rows) never trained.

  python train.py --config configs/ablations/shaw_clipping.py --workdir runs/shaw_clipping \
      --results_dir results/shaw_clipping

Expected runtime: ~20 min per 3-seed run at the ablation size (2,500 steps of 64),
measured on 2 CPU cores shared with other jobs; less alone (6 runs).
Arguments: those of configs/default.py (`smoke`, `num_seeds`, `steps`, `task`, ...).
"""

import ml_collections

from configs import default as _DEFAULT


CLIPPING = (0, 1, 2, 4, 16, 64)


def get_config(arg=None) -> ml_collections.ConfigDict:
  """configs/default.py with the Shaw scheme and 3 seeds (the user's `arg` wins)."""
  return _DEFAULT.get_config(f"scheme=shaw,num_seeds=3,ablation,{arg or ''}")


def get_sweep() -> list[dict]:
  """One run per clipping distance k."""
  return [{"model.position.max_relative_position": k} for k in CLIPPING]
