"""fedgame: differentially private federated learning where *who trains* is decided by
privacy-aware sampling and economic mechanisms (Stackelberg games, auctions, screening).

The public surface is small on purpose; everything else lives in the sub-packages, one per
concern (``core``, ``data``, ``models``, ``privacy``, ``selection``, ``sim``, ``experiments``).
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
