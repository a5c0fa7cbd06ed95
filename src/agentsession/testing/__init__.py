"""The backend conformance suite, shipped so that every backend (including third-party ones)
is held to one contract.

Subclass :class:`StoreConformance` in a test module and implement :meth:`make_store`::

    from agentsession.testing import StoreConformance

    class TestMyBackend(StoreConformance):
        def make_store(self, tmp_path, **options):
            return MyStore(tmp_path / "db", **options)

Requires ``pytest`` (install the ``dev`` extra).
"""

from .conformance import StoreConformance

__all__ = ["StoreConformance"]
