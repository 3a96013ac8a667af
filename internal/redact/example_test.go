package redact_test

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/acemq/msgaudit/internal/redact"
)

func ExampleURL() {
	fmt.Println(redact.URL("postgres://app:s3cret@db:5432/audit?sslmode=require"))
	fmt.Println(redact.URL("host=db password='s3 cret' user=app"))
	fmt.Println(redact.Strict("redis:app:s3cret@cache:6379"))
	// Output:
	// postgres://app:xxxxx@db:5432/audit?sslmode=require
	// host=db password=xxxxx user=app
	// redis:(redacted)
}

func ExampleRedactor() {
	red := redact.New(redact.URLSecrets("amqp://app:s3cret@rabbit:5672/")...)
	err := red.Error(errors.New("login app/s3cret refused"))
	fmt.Println(err)
	h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})
	slog.New(redact.NewHandler(h, red)).Warn("connect failed", "err", err, "pw", "s3cret")
	// Output:
	// login app/xxxxx refused
	// level=WARN msg="connect failed" err="login app/xxxxx refused" pw=xxxxx
}
