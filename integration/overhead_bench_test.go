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

func (nopTracer) TraceTransactionStart(ctx context.Context, _ pgtx.TraceTransactionStartData) context.Context {
	return ctx
}
func (nopTracer) TraceTransactionEnd(context.Context, pgtx.TraceTransactionEndData) {}
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
func overheadContenders(b *testing.B, dsn string, maxConns int32, edit func(*pgtx.Config)) (cs []overheadContender, closeAll func()) {
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
	closers := []func(){plain.Close}
	closeAll = func() {
		for _, c := range closers {
			c()
		}
	}
	b.Cleanup(closeAll)
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
	tpBegin, tp := pgtxPool(), pgtxPool()
	closers = append(closers, control.Close, tpBegin.Close, tp.Close)
	iso := pgx.TxOptions{IsoLevel: pgx.ReadCommitted}
	cs = []overheadContender{
		{"pgx.BeginTxFunc", func(ctx context.Context) error {
			return pgx.BeginTxFunc(ctx, plain, iso, func(tx pgx.Tx) error { return selectOne(ctx, tx) })
		}},
		{"pgx.BeginTxFunc-control", func(ctx context.Context) error {
			return pgx.BeginTxFunc(ctx, control, iso, func(tx pgx.Tx) error { return selectOne(ctx, tx) })
		}},
		{"pgx.BeginTxFunc-pgtxpool", func(ctx context.Context) error {
			return pgx.BeginTxFunc(ctx, tpBegin.Pgxpool(), iso, func(tx pgx.Tx) error { return selectOne(ctx, tx) })
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
	return cs, closeAll
}

// overheadBatch is how many calls in a row one contender makes before the
// next takes over, in the interleaved benchmark: short enough that the
// machine's noise hits every contender alike, long enough that most calls
// find their pool's connection warm, as a program's calls on its one pool
// do.
const overheadBatch = 8

// overheadReps is how many times BenchmarkOverhead opens fresh pools within
// one run: which server process a pool's connections get moves its latency
// by tens of percent on a shared machine, so one set of pools would measure
// that luck, not the contenders.
const overheadReps = 5

// BenchmarkOverhead measures pgtx.Transaction against pgx.BeginTxFunc,
// interleaved in short batches so that the machine's noise hits all alike:
// each iteration runs overheadBatch transactions of every contender, the
// contenders in a random order each time, from 1 and from 8 goroutines, on
// fresh pools in each of overheadReps repetitions. Each call gets its own
// deadline, as a request's would. It reports every contender's median and
// mean latency (the median over the repetitions; ns/op is per iteration,
// all contenders) and, within each repetition, the ratio of
// pgx.BeginTxFunc's median to each other contender's (above 1 is faster):
// its median over the repetitions, and for pgtx also the lowest and the
// highest. The A/A control's ratio shows the method's own noise.
//
//	go test ./integration -run '^$' -bench Overhead -benchtime 1500x
func BenchmarkOverhead(b *testing.B) {
	dsn := newDB(b)
	for _, workers := range []int{1, 8} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			reps := min(overheadReps, b.N)
			var medians, means [][]float64 // [contender][rep], ns
			var names []string
			done := 0
			b.StopTimer()
			for rep := range reps {
				cs, closeAll := overheadContenders(b, dsn, int32(workers), nil)
				if names == nil {
					for _, c := range cs {
						names = append(names, c.name)
					}
					medians, means = make([][]float64, len(cs)), make([][]float64, len(cs))
				}
				n := (b.N - done) / (reps - rep)
				done += n
				b.StartTimer()
				lat, err := interleaveBatches(workers, n, uint64(rep), cs)
				b.StopTimer()
				closeAll()
				if err != nil {
					b.Fatal(err)
				}
				for i := range cs {
					slices.Sort(lat[i])
					var sum time.Duration
					for _, d := range lat[i] {
						sum += d
					}
					medians[i] = append(medians[i], float64(lat[i][len(lat[i])/2]))
					means[i] = append(means[i], float64(sum)/float64(len(lat[i])))
				}
			}
			for i, name := range names {
				b.ReportMetric(medianOf(medians[i]), name+"-median-ns")
				b.ReportMetric(medianOf(means[i]), name+"-mean-ns")
			}
			ratios := func(i int) []float64 {
				r := make([]float64, reps)
				for k := range reps {
					r[k] = medians[0][k] / medians[i][k]
				}
				return r
			}
			b.ReportMetric(medianOf(ratios(1)), "control-ratio")
			b.ReportMetric(medianOf(ratios(2)), "pgtxpool-ratio")
			pgtxRatios := ratios(3)
			b.ReportMetric(medianOf(pgtxRatios), "pgtx-ratio")
			b.ReportMetric(slices.Min(pgtxRatios), "pgtx-ratio-min")
			b.ReportMetric(slices.Max(pgtxRatios), "pgtx-ratio-max")
		})
	}
}

// interleaveBatches runs n iterations over workers goroutines; each
// iteration makes overheadBatch calls of every contender, the contenders in
// a random order. It returns every call's latency per contender, or the
// first error, after joining every goroutine.
func interleaveBatches(workers, n int, seed uint64, cs []overheadContender) ([][]time.Duration, error) {
	lat := make([][][]time.Duration, workers) // [worker][contender]
	var next atomic.Int64
	var failed atomic.Value
	var wg sync.WaitGroup
	for w := range workers {
		lat[w] = make([][]time.Duration, len(cs))
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(seed, uint64(w)))
			for next.Add(1) <= int64(n) {
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
	if err, _ := failed.Load().(error); err != nil {
		return nil, err
	}
	merged := make([][]time.Duration, len(cs))
	for w := range workers {
		for i := range cs {
			merged[i] = append(merged[i], lat[w][i]...)
		}
	}
	return merged, nil
}

// medianOf returns the median of vs, which it leaves as they are.
func medianOf(vs []float64) float64 {
	vs = slices.Clone(vs)
	slices.Sort(vs)
	if n := len(vs); n%2 == 0 {
		return (vs[n/2-1] + vs[n/2]) / 2
	}
	return vs[len(vs)/2]
}

// BenchmarkTransaction measures each contender alone, one goroutine, for
// its allocations per transaction: pgx.BeginTxFunc on a plain pgxpool and
// on pgtx's pool, pgtx without a tracer, and pgtx with a no-op tracer; with
// context.Background and with a per-call deadline, as a request has (which
// makes pgx watch the context of every statement), once later than the
// session's statement_timeout and once earlier (which pgtx carries to the
// server). Its ns/op are
// sequential, not interleaved: compare latencies with BenchmarkOverhead.
//
//	cd integration && go test -run '^$' -bench Transaction -benchmem
func BenchmarkTransaction(b *testing.B) {
	dsn := newDB(b)
	cs, _ := overheadContenders(b, dsn, 1, nil)
	withTracer, _ := overheadContenders(b, dsn, 1, func(c *pgtx.Config) { c.Tracer = nopTracer{} })
	traced := withTracer[3]
	traced.name = "pgtx-tracer"
	cs = append(slices.Delete(cs, 1, 2), traced) // the A/A control allocates as the baseline
	// The deadlines: none; 10s, later than the session's statement_timeout
	// (5s), so pgtx carries nothing to the server; 1s, which pgtx carries
	// (its statement_timeout, in the write that carries BEGIN).
	for _, deadline := range []time.Duration{0, 10 * time.Second, time.Second} {
		for _, c := range cs {
			name := "ctx=background/" + c.name
			switch deadline {
			case 10 * time.Second:
				name = "ctx=deadline/" + c.name
			case time.Second:
				name = "ctx=deadline-carried/" + c.name
			}
			b.Run(name, func(b *testing.B) {
				b.ReportAllocs()
				parent := context.Background()
				for b.Loop() {
					ctx, cancel := parent, context.CancelFunc(func() {})
					if deadline > 0 {
						ctx, cancel = context.WithTimeout(parent, deadline)
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

// BenchmarkTransactionShapes measures allocations per transaction for the
// shapes of fn that take pgtx's other paths: a query with an argument (its
// BEGIN travels in a batch with it, in the connection's exec mode) and a
// one-row update with arguments (the id is read in the first write, and
// COMMIT goes bare), against pgx.BeginTxFunc on a plain pgxpool.
func BenchmarkTransactionShapes(b *testing.B) {
	dsn := newDB(b)
	ctx := testCtx(b)
	setup := directConn(b, dsn)
	if _, err := setup.Exec(ctx, "create table counters (id int primary key, n int not null); insert into counters values (1, 0)"); err != nil {
		b.Fatal(err)
	}
	plain, err := pgxpool.New(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(plain.Close)
	pool := newPool(b, dsn, nil)
	shapes := []struct {
		name string
		fn   func(ctx context.Context, tx pgx.Tx) error
	}{
		{"queryrow-arg", func(ctx context.Context, tx pgx.Tx) error {
			var n int
			return tx.QueryRow(ctx, "select $1::int", 1).Scan(&n)
		}},
		{"update", func(ctx context.Context, tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "update counters set n = n + $2 where id = $1", 1, 1)
			return err
		}},
	}
	for _, s := range shapes {
		b.Run(s.name+"/pgx.BeginTxFunc", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := pgx.BeginTxFunc(ctx, plain, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error { return s.fn(ctx, tx) }); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(s.name+"/pgtx", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, s.fn); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
