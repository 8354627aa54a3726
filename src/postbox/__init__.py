"""postbox: a transactional-outbox change-data-capture pipeline.

Applications emit events into an outbox table inside their own PostgreSQL transaction;
Debezium carries them to Kafka; consumers apply their effects to Redis exactly once.
"""

from importlib.metadata import PackageNotFoundError, version as _distribution_version

try:
    #: The installed build's version, made from git at build time (tools/git_version.py).
    __version__ = _distribution_version("postbox-cdc")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
