"""postbox: a transactional-outbox change-data-capture pipeline.

Applications emit events into an outbox table inside their own PostgreSQL transaction;
Debezium carries them to Kafka; consumers apply their effects to Redis exactly once.
"""

__version__ = "0.1.0"
