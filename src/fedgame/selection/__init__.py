"""Client-selection strategies, registered by name in :data:`SELECTIONS`."""

from fedgame.selection.base import SELECTIONS, SelectionStrategy, check_distribution, multinomial

__all__ = ["SELECTIONS", "SelectionStrategy", "check_distribution", "multinomial"]

from fedgame.selection.privacy_aware import PrivacyAware, pips_inclusion, systematic_sample  # noqa: E402  (registers)

__all__ += ["PrivacyAware", "pips_inclusion", "systematic_sample"]
