"""Every registered architecture implements the decoding protocol `Seq2SeqModel`."""

import inspect

from relpos_jax import architectures


def test_every_architecture_implements_the_decoding_protocol():
  for name, cls in architectures.ARCHS.items():
    for method in ("__call__", "check_lengths", "cache_sizing", "prime", "step"):
      want = inspect.signature(getattr(architectures.Seq2SeqModel, method)).parameters
      have = inspect.signature(getattr(cls, method)).parameters
      assert list(want) == list(have), (name, method)
    assert isinstance(cls.joint_positions, bool), name
