"""Client-selection strategies, registered by name in :data:`SELECTIONS`."""

from fedgame.selection.base import SELECTIONS, SelectionStrategy, check_distribution, multinomial

__all__ = ["SELECTIONS", "SelectionStrategy", "check_distribution", "multinomial"]

from fedgame.selection.privacy_aware import PrivacyAware, pips_inclusion, systematic_sample  # noqa: E402  (registers)

__all__ += ["PrivacyAware", "pips_inclusion", "systematic_sample"]

from fedgame.selection.aocs import AOCS, aocs_probabilities  # noqa: E402  (registers)
from fedgame.selection.delta import Delta, delta_probabilities  # noqa: E402  (registers)
from fedgame.selection.fedcbs import FedCBS, fedcbs_inclusion, qcid  # noqa: E402  (registers)
from fedgame.selection.fixed import FixedSets  # noqa: E402  (registers)
from fedgame.selection.phs import PHSSchedule, draw_schedule, planned_counts  # noqa: E402  (registers)
from fedgame.selection.power_of_choice import PowerOfChoice  # noqa: E402  (registers)

__all__ += ["AOCS", "aocs_probabilities", "Delta", "delta_probabilities", "FedCBS", "fedcbs_inclusion", "qcid", "PowerOfChoice"]
__all__ += ["PHSSchedule", "draw_schedule", "planned_counts", "FixedSets"]
