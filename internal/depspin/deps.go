//go:build tools

// Package depspin pins the project's dependencies while the packages that use them are written.
package depspin

import (
	_ "github.com/bits-and-blooms/bitset"
	_ "github.com/go-stomp/stomp/v3"
	_ "github.com/hashicorp/golang-lru/v2/simplelru"
	_ "github.com/jackc/pgx/v5"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/rabbitmq/amqp091-go"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/schollz/progressbar/v3"
	_ "gonum.org/v1/plot"
	_ "modernc.org/sqlite"
	_ "pgregory.net/rapid"
)
