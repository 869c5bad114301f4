package integration

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
)

// nopTracer is the cheapest possible tracer, to show what the hook itself
// costs when set.
type nopTracer struct{}

func (nopTracer) TraceAttemptStart(ctx context.Context, _ pgtx.TraceAttemptStartData) context.Context {
	return ctx
}
func (nopTracer) TraceAttemptEnd(context.Context, pgtx.TraceAttemptEndData) {}

// BenchmarkTransaction measures a one-statement transaction, side by side:
// pgx.BeginTxFunc on the same pool, pgtx without a tracer, and pgtx with a
// no-op tracer. Allocations per transaction show what pgtx adds.
//
//	go test ./integration -run '^$' -bench Transaction -benchmem
func BenchmarkTransaction(b *testing.B) {
	ctx := context.Background()
	dsn := newDB(b)
	plain := newPool(b, dsn, nil)
	traced := newPool(b, dsn, func(c *pgtx.Config) { c.Tracer = nopTracer{} })
	work := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "select 1")
		return err
	}
	for _, p := range []*pgtx.Pool{plain, traced} {
		if err := pgtx.Transaction(ctx, p, pgtx.ReadCommitted, work); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("pgx.BeginTxFunc", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := pgx.BeginTxFunc(ctx, plain, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error { return work(ctx, tx) }); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pgtx", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := pgtx.Transaction(ctx, plain, pgtx.ReadCommitted, work); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pgtx-tracer", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := pgtx.Transaction(ctx, traced, pgtx.ReadCommitted, work); err != nil {
				b.Fatal(err)
			}
		}
	})
}
