"""The local stack: PostgreSQL, Redis, Kafka (KRaft) and Kafka Connect with Debezium, as plain
processes under one state folder, for machines without a Docker engine.

`postbox up` / `down` / `status` drive it through :class:`postbox.stack.stack.LocalStack`.
"""
