package pgtxslog_test

import (
	"context"
	"log/slog"
	"os"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxslog"
)

// The tracer is normally set as Config.Tracer (cfg.Tracer =
// pgtxslog.New(logger, nil)) and pgtx calls it. Here its hook is called
// directly, as pgtx does when a SERIALIZABLE transaction lost to a
// concurrent one and is about to run again.
func Example() {
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		Level: slog.LevelDebug, // conflict retries are logged at Debug
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) == 0 && a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	tracer := pgtxslog.New(logger, nil)

	tracer.TraceAttemptEnd(context.Background(), pgtx.TraceAttemptEndData{
		Label:     "transfer",
		Isolation: pgtx.Serializable,
		Attempt:   1,
		Err: &pgconn.PgError{
			Severity: "ERROR",
			Code:     pgerrcode.SerializationFailure,
			Message:  "could not serialize access due to concurrent update",
		},
		Class:    pgtx.ClassConflict,
		Duration: 4 * time.Millisecond,
		Retry:    true,
		Backoff:  3 * time.Millisecond,
	})
	// Output:
	// level=DEBUG msg="pgtx: retrying transaction" pgtx.label=transfer pgtx.isolation=SERIALIZABLE pgtx.attempt=1 pgtx.class=conflict pgtx.sqlstate=40001 pgtx.err="ERROR: could not serialize access due to concurrent update (SQLSTATE 40001)" pgtx.backoff=3ms pgtx.duration=4ms
}

// ExampleNew sets the tracer on a pool's Config, with a committed call
// logged at Info.
func ExampleNew() {
	ctx := context.Background()
	cfg, err := pgtx.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		slog.Error("config", "err", err)
		return
	}
	cfg.Tracer = pgtxslog.New(slog.Default(), &pgtxslog.Options{
		LogSuccess: true,
		Succeeded:  slog.LevelInfo,
	})
	pool, err := pgtx.NewWithConfig(ctx, cfg)
	if err != nil {
		slog.Error("connect", "err", err)
		return
	}
	defer pool.Close()
}
