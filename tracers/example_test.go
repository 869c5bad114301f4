package tracers_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/tracers"
)

// counter counts the calls that ended.
type counter struct{ ended int }

func (c *counter) TraceTransactionStart(ctx context.Context, _ pgtx.TraceTransactionStartData) context.Context {
	return ctx
}
func (c *counter) TraceTransactionEnd(context.Context, pgtx.TraceTransactionEndData) { c.ended++ }
func (c *counter) TraceAttemptStart(ctx context.Context, _ pgtx.TraceAttemptStartData) context.Context {
	return ctx
}
func (c *counter) TraceAttemptEnd(context.Context, pgtx.TraceAttemptEndData) {}

// logger logs the calls that ended.
type logger struct{ l *slog.Logger }

func (l logger) TraceTransactionStart(ctx context.Context, _ pgtx.TraceTransactionStartData) context.Context {
	return ctx
}
func (l logger) TraceTransactionEnd(_ context.Context, d pgtx.TraceTransactionEndData) {
	l.l.Info("transaction ended", "label", d.Label, "attempts", d.Attempts)
}
func (l logger) TraceAttemptStart(ctx context.Context, _ pgtx.TraceAttemptStartData) context.Context {
	return ctx
}
func (l logger) TraceAttemptEnd(context.Context, pgtx.TraceAttemptEndData) {}

// Example sends one pool's events to two tracers; in a program they would
// be pgtxslog's and pgtxprom's or pgtxotel's.
func Example() {
	metrics := &counter{}
	log := logger{slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))}

	cfg, err := pgtx.ParseConfig("postgres://app@127.0.0.1:5432/app")
	if err != nil {
		panic(err)
	}
	cfg.Tracer = tracers.Join(log, metrics)

	// The pool calls the tracer; here it is called by hand.
	ctx := cfg.Tracer.TraceTransactionStart(context.Background(), pgtx.TraceTransactionStartData{Label: "transfer"})
	cfg.Tracer.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{Label: "transfer", Attempts: 1})
	fmt.Println("calls counted:", metrics.ended)
	// Output:
	// level=INFO msg="transaction ended" label=transfer attempts=1
	// calls counted: 1
}
