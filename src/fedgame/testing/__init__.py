"""Contract suites a plug-in author runs on their own class (after scikit-learn's
``check_estimator`` and Optuna's sampler tests); the project's tests run them on every built-in.

Each ``check_*`` function raises :class:`AssertionError` naming the broken contract, and returns
None when the plug-in keeps it::

    from fedgame.testing import check_selection
    check_selection(lambda: LossSoftmax(10))

:func:`check_plugin` checks a registered class as a run builds it (a recipe naming it, its
``from_config``, then the contract above for its kind)::

    from fedgame.testing import check_plugin
    check_plugin(LossSoftmax)

The checks are statistical where the contract is (10^5 seeded draws, 4-standard-error bounds),
so a correct plug-in passes them with overwhelming probability and a biased one fails.
"""

from fedgame.testing.accountant import check_accountant
from fedgame.testing.aggregator import check_aggregator
from fedgame.testing.auction import check_auction
from fedgame.testing.dataset import check_dataset
from fedgame.testing.incentive import check_incentive
from fedgame.testing.plugin import check_plugin
from fedgame.testing.privacy import check_privacy_plan
from fedgame.testing.selection import check_selection

__all__ = [
    "check_accountant",
    "check_aggregator",
    "check_auction",
    "check_dataset",
    "check_incentive",
    "check_plugin",
    "check_privacy_plan",
    "check_selection",
]
