"""Where ``stateful_loader_class`` was imported from in 0.2; it lives in ``loaders/base.py`` now.

NOTE: kept so that ``from lightning_shard.loaders.variants import stateful_loader_class`` (the path the 0.2
CHANGELOG gives) still works. The table of variants it held is gone: each ``Stateful*`` class registers
itself (``ResumableLoader.__init_subclass__``), so the base no longer imports the loaders.
"""

from lightning_shard.loaders.base import stateful_loader_class

__all__ = ["stateful_loader_class"]
