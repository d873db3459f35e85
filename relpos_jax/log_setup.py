"""Logging for the entry points: INFO progress lines, without orbax's chatter."""

import logging as std_logging

from absl import logging


def _not_orbax_info(record: std_logging.LogRecord) -> bool:
  """Keeps warnings and everything not logged from inside orbax."""
  return record.levelno >= std_logging.WARNING or "/orbax/" not in record.pathname


def setup() -> None:
  """INFO verbosity; orbax's per-checkpoint INFO records are dropped (its warnings stay)."""
  logging.set_verbosity(logging.INFO)
  absl_logger = logging.get_absl_logger()
  if _not_orbax_info not in absl_logger.filters:
    absl_logger.addFilter(_not_orbax_info)
