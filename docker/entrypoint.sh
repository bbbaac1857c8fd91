#!/bin/sh
# Entrypoint of the dlock image: redis-server with the dlock module loaded, then
# the official image's docker-entrypoint.sh (which also steps down to the redis
# user if the container was started as root).
#
#   docker run dlock                                  redis-server --loadmodule <module>
#   docker run dlock --appendonly yes                 ... plus redis-server options
#   docker run dlock /path/redis.conf --port 7000     a config file (first), then options
#   docker run -e DLOCK_MODULE_ARGS='default-lease-ms 10000' dlock
#                                                     ... arguments for the module
#   docker run dlock redis-cli -h host PING           any other command runs as is
set -e
set -f # DLOCK_MODULE_ARGS is split into words below, never globbed

DLOCK_MODULE="${DLOCK_MODULE:-/usr/local/lib/libdlock.so}"

# As in docker-entrypoint.sh: options, or a .conf file, alone mean redis-server.
if [ "$#" -eq 0 ] || [ "${1#-}" != "$1" ] || [ "${1%.conf}" != "$1" ]; then
	set -- redis-server "$@"
fi

if [ "$1" = redis-server ]; then
	shift
	conf=
	# redis-server takes a config file only as its first argument.
	if [ "$#" -gt 0 ] && [ "${1%.conf}" != "$1" ]; then
		conf=$1
		shift
	fi
	# shellcheck disable=SC2086 # one word per module argument
	set -- redis-server ${conf:+"$conf"} --loadmodule "$DLOCK_MODULE" $DLOCK_MODULE_ARGS "$@"
fi

exec docker-entrypoint.sh "$@"
