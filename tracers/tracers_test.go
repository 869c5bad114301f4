package tracers_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/failover"
	"github.com/pgtx-go/pgtx/internal/leakcheck"
	"github.com/pgtx-go/pgtx/pooler"
	"github.com/pgtx-go/pgtx/tracers"
)

func TestMain(m *testing.M) { leakcheck.Main(m) }

type ctxKey string

// recorder is a TransactionTracer that records its events, and checks that
// its end methods see the value its start methods put in the context.
type recorder struct {
	name string
	mu   sync.Mutex
	log  []string
	lost int // ends whose context lacked the start's value
}

func (r *recorder) add(e string) {
	r.mu.Lock()
	r.log = append(r.log, e)
	r.mu.Unlock()
}

func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.log)
}

func (r *recorder) TraceTransactionStart(ctx context.Context, _ pgtx.TraceTransactionStartData) context.Context {
	r.add("tx start")
	return context.WithValue(ctx, ctxKey(r.name), "tx")
}

func (r *recorder) TraceTransactionEnd(ctx context.Context, _ pgtx.TraceTransactionEndData) {
	if ctx.Value(ctxKey(r.name)) != "tx" {
		r.mu.Lock()
		r.lost++
		r.mu.Unlock()
	}
	r.add("tx end")
}

func (r *recorder) TraceAttemptStart(ctx context.Context, _ pgtx.TraceAttemptStartData) context.Context {
	r.add("attempt start")
	return context.WithValue(ctx, ctxKey(r.name+"/attempt"), "attempt")
}

func (r *recorder) TraceAttemptEnd(ctx context.Context, _ pgtx.TraceAttemptEndData) {
	if ctx.Value(ctxKey(r.name+"/attempt")) != "attempt" || ctx.Value(ctxKey(r.name)) != "tx" {
		r.mu.Lock()
		r.lost++
		r.mu.Unlock()
	}
	r.add("attempt end")
}

// full also implements every optional interface.
type full struct{ recorder }

func (f *full) TraceCancel(context.Context, pgtx.TraceCancelData)         { f.add("cancel") }
func (f *full) TraceContention(context.Context, pgtx.TraceContentionData) { f.add("contention") }
func (f *full) TraceBreakerStateChange(context.Context, pgtx.TraceBreakerStateChangeData) {
	f.add("breaker")
}
func (f *full) TraceCommitLost(context.Context, failover.CommitLostData) { f.add("commit lost") }
func (f *full) TraceReplication(context.Context, failover.ReplicationData) {
	f.add("replication")
}
func (f *full) TracePooler(context.Context, pooler.Data) { f.add("pooler") }

// TestOptionalEventsReachOnlyTheirTracers: each optional event goes to the
// tracers that implement its interface, in order, and nil entries are
// skipped.
func TestOptionalEventsReachOnlyTheirTracers(t *testing.T) {
	plain, a, b := &recorder{name: "plain"}, &full{recorder{name: "a"}}, &full{recorder{name: "b"}}
	tr := tracers.Join(a, nil, plain, b)
	ctx := context.Background()
	tr.TraceCancel(ctx, pgtx.TraceCancelData{})
	tr.TraceContention(ctx, pgtx.TraceContentionData{})
	tr.TraceBreakerStateChange(ctx, pgtx.TraceBreakerStateChangeData{})
	tr.TraceCommitLost(ctx, failover.CommitLostData{})
	tr.TraceReplication(ctx, failover.ReplicationData{})
	tr.TracePooler(ctx, pooler.Data{})
	want := []string{"cancel", "contention", "breaker", "commit lost", "replication", "pooler"}
	for _, f := range []*full{a, b} {
		if got := f.events(); !slices.Equal(got, want) {
			t.Errorf("%s got %v, want %v", f.name, got, want)
		}
	}
	if got := plain.events(); len(got) != 0 {
		t.Errorf("a tracer without the optional interfaces got %v", got)
	}
}

// TestJoinOfJoins: a joined Tracer joined again still hands each optional
// event to the tracers inside it that implement its interface.
func TestJoinOfJoins(t *testing.T) {
	plain, a, b := &recorder{name: "plain"}, &full{recorder{name: "a"}}, &full{recorder{name: "b"}}
	tr := tracers.Join(tracers.Join(a, plain), nil, b)
	ctx := tr.TraceTransactionStart(context.Background(), pgtx.TraceTransactionStartData{})
	tr.TraceCancel(ctx, pgtx.TraceCancelData{})
	tr.TraceCommitLost(ctx, failover.CommitLostData{})
	tr.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{})
	want := []string{"tx start", "cancel", "commit lost", "tx end"}
	for _, f := range []*full{a, b} {
		if got := f.events(); !slices.Equal(got, want) {
			t.Errorf("%s got %v, want %v", f.name, got, want)
		}
	}
	if got, want := plain.events(), []string{"tx start", "tx end"}; !slices.Equal(got, want) {
		t.Errorf("plain got %v, want %v", got, want)
	}
	if a.lost != 0 || b.lost != 0 || plain.lost != 0 {
		t.Error("an end's context lacked its start's value")
	}
}

// TestEmpty: Join with no tracer, or only nil ones, is a tracer that does
// nothing and passes the context through.
func TestEmpty(t *testing.T) {
	for _, tr := range []*tracers.Tracer{tracers.Join(), tracers.Join(nil, nil)} {
		ctx := context.WithValue(context.Background(), ctxKey("k"), "v")
		if got := tr.TraceTransactionStart(ctx, pgtx.TraceTransactionStartData{}); got != ctx {
			t.Error("TraceTransactionStart changed the context")
		}
		if got := tr.TraceAttemptStart(ctx, pgtx.TraceAttemptStartData{}); got != ctx {
			t.Error("TraceAttemptStart changed the context")
		}
		tr.TraceAttemptEnd(ctx, pgtx.TraceAttemptEndData{})
		tr.TraceTransactionEnd(ctx, pgtx.TraceTransactionEndData{})
		tr.TraceCancel(ctx, pgtx.TraceCancelData{})
		tr.TraceContention(ctx, pgtx.TraceContentionData{})
		tr.TraceBreakerStateChange(ctx, pgtx.TraceBreakerStateChangeData{})
		tr.TraceCommitLost(ctx, failover.CommitLostData{})
		tr.TraceReplication(ctx, failover.ReplicationData{})
	}
}

// TestOnePoolTwoTracers: a pool's calls reach both tracers, every start
// with its end, and each tracer's end sees what its own start put in the
// context. The pool's server does not exist, so the call fails at once.
func TestOnePoolTwoTracers(t *testing.T) {
	cfg, err := pgtx.ParseConfig("postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	a, b := &full{recorder{name: "a"}}, &recorder{name: "b"}
	cfg.Tracer = tracers.Join(a, b)
	cfg.Retry.UnavailableTimeout = -1 // fail on the first refusal
	cfg.Breaker = &pgtx.BreakerConfig{MinCalls: 1, FailureRatio: 0.5}
	pool, err := pgtx.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = pgtx.Transaction(ctx, pool, pgtx.ReadCommitted, func(context.Context, pgx.Tx) error { return nil })
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call to a server that does not exist: err = %v, want a refusal", err)
	}
	want := []string{"tx start", "attempt start", "attempt end", "tx end"}
	if got := b.events(); !slices.Equal(got, want) {
		t.Errorf("b got %v, want %v", got, want)
	}
	got := a.events()
	if !slices.Contains(got, "breaker") || !slices.Equal(slices.DeleteFunc(slices.Clone(got), func(e string) bool { return e == "breaker" }), want) {
		t.Errorf("a got %v, want %v and the breaker's opening", got, want)
	}
	if a.lost != 0 || b.lost != 0 {
		t.Errorf("ends whose context lacked their start's value: a %d, b %d", a.lost, b.lost)
	}
}
