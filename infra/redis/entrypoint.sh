#!/bin/sh
# Redis in docker compose: write the aclfile from the environment (passwords as SHA-256 only, in a
# file only the container sees, readable by the redis user), then hand over to the image's own
# entrypoint, which drops from root to the `redis` user for redis-server (docker-library/redis).
set -eu
: "${POSTBOX_REDIS_ADMIN_PASSWORD:?}" "${POSTBOX_REDIS_CONSUMER_PASSWORD:?}"
hash() { printf '%s' "$1" | sha256sum | cut -d' ' -f1; }
rules=$(grep -v '^#' /postbox-redis/consumer.rules)
umask 077
{
  echo "user default on #$(hash "$POSTBOX_REDIS_ADMIN_PASSWORD") ~* &* +@all"
  echo "user postbox_consumer on #$(hash "$POSTBOX_REDIS_CONSUMER_PASSWORD") $rules"
} > /tmp/postbox-users.acl
chown redis:redis /tmp/postbox-users.acl
# With replicas (docker-compose.replicas.yml): any node may be a replica after a failover, so each
# logs in to its primary as `default`. Written on the container's first start only: later starts
# keep what Sentinel rewrote into the file (CONFIG REWRITE: the node's role after a failover).
if [ "${POSTBOX_REDIS_REPLICATION:-}" = yes ] && [ ! -e /tmp/postbox-replication.conf ]; then
  quote() { printf '"%s"' "$(printf '%s' "$1" | sed 's/[\\"]/\\&/g')"; }
  {
    echo "masteruser default"
    printf 'masterauth %s\n' "$(quote "$POSTBOX_REDIS_ADMIN_PASSWORD")"  # printf: sh's echo would undo the escapes
    if [ -n "${POSTBOX_REDIS_REPLICA_OF:-}" ]; then echo "replicaof $POSTBOX_REDIS_REPLICA_OF"; fi
  } > /tmp/postbox-replication.conf
  chown redis:redis /tmp/postbox-replication.conf
fi
unset POSTBOX_REDIS_ADMIN_PASSWORD POSTBOX_REDIS_CONSUMER_PASSWORD
exec docker-entrypoint.sh "$@"
