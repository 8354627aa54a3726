#!/bin/sh
# A Sentinel in docker compose (docker-compose.replicas.yml): write its config, with the primary's
# login (auth-user default / auth-pass, the admin password) and the address it announces, into a
# file only the container sees and Sentinel may rewrite (it records there the primary, replicas and
# other Sentinels it learns), then hand over to the image's own entrypoint, which drops from root
# to the `redis` user for redis-server (docker-library/redis).
#
# Every Redis and Sentinel process shares one network namespace whose ports are published 1:1 on
# the host's loopback, so 127.0.0.1 and this Sentinel's port reach it from the host and from the
# other Sentinels alike (see the comment in docker-compose.replicas.yml).
set -eu
: "${POSTBOX_REDIS_ADMIN_PASSWORD:?}" "${POSTBOX_SENTINEL_PORT:?}"
conf=/tmp/postbox-sentinel.conf
quote() { printf '"%s"' "$(printf '%s' "$1" | sed 's/[\\"]/\\&/g')"; }
umask 077
# First start only: a restarted Sentinel keeps what it learned (the primary after a failover).
if [ ! -e "$conf" ]; then
  {
    echo "port $POSTBOX_SENTINEL_PORT"
    echo "sentinel announce-ip 127.0.0.1"
    echo "sentinel announce-port $POSTBOX_SENTINEL_PORT"
    echo "sentinel monitor postbox 127.0.0.1 6379 2"
    echo "sentinel auth-user postbox default"
    printf 'sentinel auth-pass postbox %s\n' "$(quote "$POSTBOX_REDIS_ADMIN_PASSWORD")"  # printf: sh's echo would undo the escapes
    echo "sentinel down-after-milliseconds postbox 5000"
    echo "sentinel failover-timeout postbox 60000"
    echo "sentinel parallel-syncs postbox 1"
  } > "$conf"
  chown redis:redis "$conf"
fi
unset POSTBOX_REDIS_ADMIN_PASSWORD
exec docker-entrypoint.sh "$@"
