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
unset POSTBOX_REDIS_ADMIN_PASSWORD POSTBOX_REDIS_CONSUMER_PASSWORD
exec docker-entrypoint.sh "$@"
