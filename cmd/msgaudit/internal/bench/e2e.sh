#!/bin/sh
# e2e.sh measures msgaudit's consumers end to end against ActiveMQ (STOMP),
# RabbitMQ and NATS JetStream: msgs/s per consumer configuration, as a Markdown table on
# stdout (progress on stderr). Flags go to the program; see
#   cmd/msgaudit/internal/bench/e2e.sh -h
# It reads MSGAUDIT_STOMP_ADDR, MSGAUDIT_AMQP_URL, MSGAUDIT_NATS_URL,
# MSGAUDIT_REDIS_URL, MSGAUDIT_POSTGRES_URL and MSGAUDIT_MYSQL_URL, like the
# tests (eval "$(./scripts/services)").
set -eu
cd "$(dirname "$0")/../.." # the tools module, cmd/msgaudit
exec go run ./internal/bench/e2e/cmd/e2e "$@"
