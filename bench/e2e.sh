#!/bin/sh
# e2e.sh measures msgaudit's consumers end to end against ActiveMQ (STOMP)
# and RabbitMQ: msgs/s per consumer configuration, as a Markdown table on
# stdout (progress on stderr). Flags go to the program; see
#   bench/e2e.sh -h
# It reads MSGAUDIT_STOMP_ADDR, MSGAUDIT_AMQP_URL, MSGAUDIT_REDIS_URL and
# MSGAUDIT_POSTGRES_URL, like the tests (eval "$(./scripts/services)").
set -eu
cd "$(dirname "$0")/.."
exec go run ./bench/e2e/cmd/e2e "$@"
