package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
)

// nopTracer is the cheapest possible tracer, to show what the hook itself
// costs when set.
type nopTracer struct{}

func (nopTracer) TraceAttemptStart(ctx context.Context, _ pgtx.TraceAttemptStartData) context.Context {
	return ctx
}
func (nopTracer) TraceAttemptEnd(context.Context, pgtx.TraceAttemptEndData) {}

// selectOne is the overhead benchmarks' transaction: one statement.
func selectOne(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, "select 1")
	return err
}

// overheadContender is one way of running selectOne in a transaction.
type overheadContender struct {
	name string
	call func(ctx context.Context) error
}

// overheadContenders opens the contenders of the overhead benchmarks, each
// on a pool of its own of maxConns connections, all open, so that no
// contender runs on a connection another has just warmed: pgx.BeginTxFunc on
// a plain pgxpool with pgx's defaults (the baseline, first), the same on a
// second plain pool (an A/A control: its ratio's distance from 1 is the
// method's noise), the same on a pgtx pool (what the pool costs), and
// pgtx.Transaction. edit, when not
// nil, changes the pgtx pools' Config.
func overheadContenders(b *testing.B, dsn string, maxConns int32, edit func(*pgtx.Config)) []overheadContender {
	b.Helper()
	ctx := testCtx(b)
	pc, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		b.Fatal(err)
	}
	pc.MaxConns, pc.MinConns = maxConns, maxConns
	plain, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(plain.Close)
	pgtxPool := func() *pgtx.Pool {
		return newPool(b, dsn, func(c *pgtx.Config) {
			c.MaxConns, c.MinConns = maxConns, maxConns
			if edit != nil {
				edit(c)
			}
		})
	}
	control, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(control.Close)
	tpBegin, tp := pgtxPool(), pgtxPool()
	iso := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	cs := []overheadContender{
		{"pgx.BeginTxFunc", func(ctx context.Context) error {
			return pgx.BeginTxFunc(ctx, plain, iso, func(tx pgx.Tx) error { return selectOne(ctx, tx) })
		}},
		{"pgx.BeginTxFunc-control", func(ctx context.Context) error {
			return pgx.BeginTxFunc(ctx, control, iso, func(tx pgx.Tx) error { return selectOne(ctx, tx) })
		}},
		{"pgx.BeginTxFunc-pgtxpool", func(ctx context.Context) error {
			return pgx.BeginTxFunc(ctx, tpBegin, iso, func(tx pgx.Tx) error { return selectOne(ctx, tx) })
		}},
		{"pgtx", func(ctx context.Context) error { return pgtx.Transaction(ctx, tp, pgtx.ReadCommitted, selectOne) }},
	}
	// Every connection open, and the statement prepared on each.
	var wg sync.WaitGroup
	errs := make([]error, maxConns)
	for w := range maxConns {
		wg.Go(func() {
			for range 20 {
				for _, c := range cs {
					if err := c.call(ctx); err != nil {
						errs[w] = fmt.Errorf("%s: %w", c.name, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return cs
}

// overheadBatch is how many calls in a row one contender makes before the
// next takes over, in the interleaved benchmark: short enough that the
// machine's noise hits every contender alike, long enough that most calls
// find their pool's connection warm, as a program's calls on its one pool
// do.
const overheadBatch = 8

// BenchmarkOverhead measures pgtx.Transaction against pgx.BeginTxFunc,
// interleaved in short batches so that the machine's noise hits all alike:
// each iteration runs overheadBatch transactions of every contender, the
// contenders in a random order each time, from 1 and from 8 goroutines. Each call gets its
// own deadline, as a request's would. It reports every contender's median
// and mean latency (ns/op is per iteration, all contenders) and the ratio
// of pgx.BeginTxFunc's median to each other contender's (above 1 is
// faster). Run it several
// times (-count) for a spread:
//
//	go test ./integration -run '^$' -bench Overhead -count 5
func BenchmarkOverhead(b *testing.B) {
	dsn := newDB(b)
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			cs := overheadContenders(b, dsn, int32(workers), nil)
			lat := make([][][]time.Duration, workers) // [worker][contender]
			var next atomic.Int64
			var failed atomic.Value
			b.ResetTimer()
			var wg sync.WaitGroup
			for w := range workers {
				lat[w] = make([][]time.Duration, len(cs))
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 1))
					for {
						if next.Add(1) > int64(b.N) {
							return
						}
						for _, i := range rng.Perm(len(cs)) {
							for range overheadBatch {
								ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
								t0 := time.Now()
								err := cs[i].call(ctx)
								took := time.Since(t0)
								cancel()
								if err != nil {
									failed.CompareAndSwap(nil, fmt.Errorf("%s: %w", cs[i].name, err))
									return
								}
								lat[w][i] = append(lat[w][i], took)
							}
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			medians := make([]time.Duration, len(cs))
			for i, c := range cs {
				var all []time.Duration
				for w := range workers {
					all = append(all, lat[w][i]...)
				}
				slices.Sort(all)
				medians[i] = all[len(all)/2]
				var sum time.Duration
				for _, d := range all {
					sum += d
				}
				b.ReportMetric(float64(medians[i].Nanoseconds()), c.name+"-median-ns")
				b.ReportMetric(float64(sum.Nanoseconds())/float64(len(all)), c.name+"-mean-ns")
			}
			b.ReportMetric(float64(medians[0])/float64(medians[1]), "control-ratio")
			b.ReportMetric(float64(medians[0])/float64(medians[2]), "pgtxpool-ratio")
			b.ReportMetric(float64(medians[0])/float64(medians[3]), "pgtx-ratio")
		})
	}
}

// BenchmarkTransaction measures each contender alone, one goroutine, for
// its allocations per transaction: pgx.BeginTxFunc on a plain pgxpool and
// on pgtx's pool, pgtx without a tracer, and pgtx with a no-op tracer; with
// context.Background and with a per-call deadline, as a request has (which
// makes pgx watch the context of every statement). Its ns/op are
// sequential, not interleaved: compare latencies with BenchmarkOverhead.
//
//	go test ./integration -run '^$' -bench Transaction -benchmem
func BenchmarkTransaction(b *testing.B) {
	dsn := newDB(b)
	cs := overheadContenders(b, dsn, 1, nil)
	traced := overheadContenders(b, dsn, 1, func(c *pgtx.Config) { c.Tracer = nopTracer{} })[3]
	traced.name = "pgtx-tracer"
	cs = append(slices.Delete(cs, 1, 2), traced) // the A/A control allocates as the baseline
	for _, deadline := range []bool{false, true} {
		for _, c := range cs {
			name := "ctx=background/" + c.name
			if deadline {
				name = "ctx=deadline/" + c.name
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				parent := context.Background()
				for b.Loop() {
					ctx, cancel := parent, context.CancelFunc(func() {})
					if deadline {
						ctx, cancel = context.WithTimeout(parent, 10*time.Second)
					}
					err := c.call(ctx)
					cancel()
					if err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
