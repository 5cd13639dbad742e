"""Client-selection strategies, registered by name in :data:`SELECTIONS`."""

from fedgame.selection.base import SELECTIONS, SelectionStrategy, check_distribution, multinomial

__all__ = ["SELECTIONS", "SelectionStrategy", "check_distribution", "multinomial"]
