"""The import path of ``stateful_loader_class`` that the 0.2 CHANGELOG gives; it lives in ``loaders/base.py``."""

from lightning_shard.loaders.base import stateful_loader_class as stateful_loader_class
