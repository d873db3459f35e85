"""Logging for the entry points: INFO progress lines, without orbax's chatter."""

import logging as std_logging

from absl import logging


# Warnings orbax logs every time a reader opens checkpoints read-only, as it should.
_EXPECTED_ORBAX_WARNINGS = ("read_only=True, setting save_interval_steps=0",
                            "Given directory is read only")


def _not_orbax_info(record: std_logging.LogRecord) -> bool:
  """Keeps warnings and everything not logged from inside orbax (but its expected warnings)."""
  if "/orbax/" not in record.pathname:
    return True
  return record.levelno >= std_logging.WARNING and not any(
      text in record.getMessage() for text in _EXPECTED_ORBAX_WARNINGS)


def setup() -> None:
  """INFO verbosity; orbax's per-checkpoint INFO records are dropped (its warnings stay,
  but those about opening checkpoints read-only, which readers do on purpose)."""
  logging.set_verbosity(logging.INFO)
  absl_logger = logging.get_absl_logger()
  if _not_orbax_info not in absl_logger.filters:
    absl_logger.addFilter(_not_orbax_info)
