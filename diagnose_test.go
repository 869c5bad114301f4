package pgtx

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"
)

// diagWindow is what happened to a pool between two diagSnapshots, plus the instant
// readings of the second.
type diagWindow struct {
	calls, held     int64
	hold            time.Duration // mean hold of the held attempts
	acquires        int64
	wait            time.Duration // mean acquire wait
	timeouts, full  int64
	waiters         int64
	inFlight        int
	oldestInFlight  time.Duration
	countersReverse bool // after's counters below before's
}

// diagHistory is a pool's counters before the diagWindow, so the tests check that
// Diagnose uses deltas, not totals.
var diagHistory = Stats{
	Calls: 100_000, Held: 99_000, HoldTime: 99_000 * 3 * time.Millisecond,
	AcquireWait:     Histogram{Count: 99_500, Sum: 99_500 * 50 * time.Microsecond},
	AcquireTimeouts: 7, QueueFull: 2,
}

// diagSnapshots returns the before and after Stats of w.
func diagSnapshots(t *testing.T, w diagWindow) (before, after Stats) {
	t.Helper()
	before = diagHistory
	after = Stats{
		Calls:           before.Calls + w.calls,
		Held:            before.Held + w.held,
		HoldTime:        before.HoldTime + time.Duration(w.held)*w.hold,
		AcquireWait:     Histogram{Count: before.AcquireWait.Count + w.acquires, Sum: before.AcquireWait.Sum + time.Duration(w.acquires)*w.wait},
		AcquireTimeouts: before.AcquireTimeouts + w.timeouts,
		QueueFull:       before.QueueFull + w.full,
		Waiters:         w.waiters,
		InFlight:        w.inFlight,
		OldestInFlight:  w.oldestInFlight,
	}
	if w.countersReverse {
		before, after = after, before
		after.Waiters, after.InFlight, after.OldestInFlight = w.waiters, w.inFlight, w.oldestInFlight
		before.Waiters, before.InFlight, before.OldestInFlight = 0, 0, 0
	}
	return before, after
}

// The crafted runs, over a 10s interval on a pool of 4 connections.
var (
	// stormWindow: the card's timeout storm. A normal 40 calls/s, but every
	// transaction holds its connection 300ms: 4 conns serve 13/s, the rest
	// wait and time out.
	stormWindow = diagWindow{calls: 400, held: 133, hold: 300 * time.Millisecond, acquires: 380, wait: 450 * time.Millisecond,
		timeouts: 247, waiters: 20, inFlight: 4, oldestInFlight: 290 * time.Millisecond}
	// spikeWindow: 2000 calls/s of 2ms transactions: fast, but 4 conns serve
	// 2000/s at best.
	spikeWindow = diagWindow{calls: 20_000, held: 19_990, hold: 2 * time.Millisecond, acquires: 19_990, wait: 30 * time.Millisecond,
		waiters: 50, inFlight: 4, oldestInFlight: 3 * time.Millisecond}
	// healthyWindow: 100 calls/s of 5ms transactions, no waiting.
	healthyWindow = diagWindow{calls: 1000, held: 1000, hold: 5 * time.Millisecond, acquires: 1000, wait: 10 * time.Microsecond,
		inFlight: 1, oldestInFlight: 2 * time.Millisecond}
)

func TestDiagnose(t *testing.T) {
	const interval = 10 * time.Second
	four := DiagnoseConfig{MaxConns: 4}
	withBaseline := func(arrival float64, hold time.Duration) DiagnoseConfig {
		return DiagnoseConfig{MaxConns: 4, BaselineArrivalRate: arrival, BaselineHold: hold}
	}
	tests := []struct {
		name     string
		w        diagWindow
		interval time.Duration
		cfg      DiagnoseConfig
		want     Verdict
		// figures checked when non-zero (wantUtil: -1 means exactly 0)
		wantArrival float64
		wantHold    time.Duration
		wantWait    time.Duration
		wantUtil    float64
		wantReason  string // a substring of one of the Reasons
	}{
		{name: "storm", w: stormWindow, cfg: four, want: VerdictTimeoutStorm,
			wantArrival: 40, wantHold: 300 * time.Millisecond, wantWait: 450 * time.Millisecond, wantUtil: 3,
			wantReason: "held by slow queries"},
		{name: "storm against baselines", w: stormWindow, cfg: withBaseline(38, 20*time.Millisecond), want: VerdictTimeoutStorm,
			wantReason: "1.1× the baseline"},
		{name: "storm below SlowHold but 3x the baseline hold",
			w:   diagWindow{calls: 400, held: 390, hold: 80 * time.Millisecond, acquires: 400, wait: 40 * time.Millisecond, waiters: 3},
			cfg: withBaseline(40, 20*time.Millisecond), want: VerdictTimeoutStorm, wantUtil: 0.8,
			wantReason: "3× the baseline hold 20ms"},
		{name: "slow with high arrivals too is still a storm",
			w:   diagWindow{calls: 4000, held: 300, hold: 250 * time.Millisecond, acquires: 3000, wait: time.Second, timeouts: 2700, waiters: 40},
			cfg: withBaseline(100, 0), want: VerdictTimeoutStorm, wantReason: "arrivals are high too"},
		{name: "spike", w: spikeWindow, cfg: four, want: VerdictTrafficSpike,
			wantArrival: 2000, wantHold: 2 * time.Millisecond, wantWait: 30 * time.Millisecond, wantUtil: 1,
			wantReason: "queries are fast"},
		{name: "spike against baselines", w: spikeWindow, cfg: withBaseline(500, 2*time.Millisecond), want: VerdictTrafficSpike,
			wantReason: "4.0× the baseline"},
		{name: "fast and saturated at the normal rate: pool too small", w: spikeWindow, cfg: withBaseline(1900, 0),
			want: VerdictTrafficSpike, wantReason: "too small for the normal load"},
		{name: "healthy", w: healthyWindow, cfg: four, want: VerdictHealthy,
			wantArrival: 100, wantHold: 5 * time.Millisecond, wantWait: 10 * time.Microsecond, wantUtil: 0.125,
			wantReason: "not saturated"},
		{name: "healthy against baselines", w: healthyWindow, cfg: withBaseline(100, 5*time.Millisecond), want: VerdictHealthy},
		{name: "healthy slow pool: slow holds alone are not saturation",
			w:   diagWindow{calls: 20, held: 20, hold: time.Second, acquires: 20},
			cfg: four, want: VerdictHealthy, wantUtil: 0.5},
		{name: "utilization alone saturates",
			w:   diagWindow{calls: 4000, held: 4000, hold: 9500 * time.Microsecond, acquires: 4000, wait: time.Millisecond},
			cfg: four, want: VerdictTrafficSpike, wantUtil: 0.95, wantReason: "utilization 0.95"},
		{name: "queue-full refusals saturate",
			w:   diagWindow{calls: 100, held: 50, hold: 400 * time.Millisecond, acquires: 50, full: 50},
			cfg: four, want: VerdictTimeoutStorm, wantReason: "50 calls refused"},
		{name: "acquire timeouts alone saturate",
			w:   diagWindow{calls: 100, held: 99, hold: time.Millisecond, acquires: 100, wait: 2 * time.Millisecond, timeouts: 1},
			cfg: four, want: VerdictTrafficSpike, wantReason: "1 acquire timeouts"},
		{name: "long transactions: baseline hold above SlowHold, 1.2x is fast",
			w:   diagWindow{calls: 100, held: 100, hold: 600 * time.Millisecond, acquires: 100, wait: 100 * time.Millisecond, waiters: 5},
			cfg: withBaseline(0, 500*time.Millisecond), want: VerdictTrafficSpike, wantReason: "3× the baseline hold 500ms"},
		{name: "long transactions: 3.2x the baseline hold is slow",
			w:   diagWindow{calls: 100, held: 100, hold: 1600 * time.Millisecond, acquires: 100, wait: 100 * time.Millisecond, waiters: 5},
			cfg: withBaseline(0, 500*time.Millisecond), want: VerdictTimeoutStorm},
		{name: "explicit SlowHold",
			w:   diagWindow{calls: 100, held: 100, hold: 300 * time.Millisecond, acquires: 100, wait: 100 * time.Millisecond, waiters: 5},
			cfg: DiagnoseConfig{SlowHold: time.Second}, want: VerdictTrafficSpike, wantReason: "< 1s (SlowHold)"},
		{name: "no connection came back: the oldest in flight stands in",
			w:   diagWindow{calls: 50, waiters: 46, inFlight: 4, oldestInFlight: 8 * time.Second},
			cfg: four, want: VerdictTimeoutStorm, wantUtil: 10, wantReason: "oldest hold in flight 8s"},
		{name: "hold unknown: storm is the safe default",
			w:   diagWindow{calls: 0, waiters: 3},
			cfg: four, want: VerdictTimeoutStorm, wantUtil: -1, wantReason: "hold time unknown"},
		{name: "hold unknown with high arrivals: spike",
			w:   diagWindow{calls: 5000, waiters: 3},
			cfg: withBaseline(100, 0), want: VerdictTrafficSpike, wantReason: "hold time unknown"},
		{name: "no pool size: no utilization, other signals decide",
			w: stormWindow, cfg: DiagnoseConfig{}, want: VerdictTimeoutStorm, wantUtil: -1},
		{name: "no calls, nothing waits", w: diagWindow{}, cfg: four, want: VerdictHealthy, wantUtil: -1},
		{name: "zero interval: rates unknown, the queue still counts", w: spikeWindow, interval: -1, cfg: four,
			want: VerdictTrafficSpike, wantUtil: -1, wantHold: 2 * time.Millisecond, wantReason: "rates are unknown"},
		{name: "negative interval", w: stormWindow, interval: -time.Second, cfg: four,
			want: VerdictTimeoutStorm, wantUtil: -1, wantReason: "rates are unknown"},
		{name: "counters backwards, nothing waits", w: diagWindow{calls: 10, held: 10, hold: time.Second, countersReverse: true},
			cfg: four, want: VerdictHealthy, wantUtil: -1, wantReason: "counters went backwards"},
		{name: "counters backwards, a stuck queue",
			w:   diagWindow{calls: 10, held: 10, countersReverse: true, waiters: 9, inFlight: 4, oldestInFlight: 3 * time.Second},
			cfg: four, want: VerdictTimeoutStorm, wantUtil: -1, wantReason: "counters went backwards"},
		{name: "NaN and negative baselines are unknown", w: spikeWindow,
			cfg:  DiagnoseConfig{MaxConns: 4, BaselineArrivalRate: math.NaN(), BaselineHold: -time.Second, SlowHold: -1},
			want: VerdictTrafficSpike, wantReason: "default SlowHold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, after := diagSnapshots(t, tt.w)
			iv := tt.interval
			switch iv {
			case 0:
				iv = interval
			case -1:
				iv = 0
			}
			d := Diagnose(before, after, iv, tt.cfg)
			t.Logf("%v\n\t%s", d, strings.Join(d.Reasons, "\n\t"))
			if d.Verdict != tt.want {
				t.Errorf("Verdict = %v, want %v", d.Verdict, tt.want)
			}
			if d.Interval != iv || d.Waiters != tt.w.waiters || d.InFlight != tt.w.inFlight || d.OldestInFlight != tt.w.oldestInFlight {
				t.Errorf("instant readings = %v/%d/%d/%v, want %v/%d/%d/%v", d.Interval, d.Waiters, d.InFlight, d.OldestInFlight,
					iv, tt.w.waiters, tt.w.inFlight, tt.w.oldestInFlight)
			}
			if tt.wantArrival != 0 && !nearlyEqual(d.ArrivalRate, tt.wantArrival) {
				t.Errorf("ArrivalRate = %v, want %v", d.ArrivalRate, tt.wantArrival)
			}
			if tt.wantHold != 0 && d.MeanHold != tt.wantHold {
				t.Errorf("MeanHold = %v, want %v", d.MeanHold, tt.wantHold)
			}
			if tt.wantWait != 0 && d.MeanAcquireWait != tt.wantWait {
				t.Errorf("MeanAcquireWait = %v, want %v", d.MeanAcquireWait, tt.wantWait)
			}
			switch {
			case tt.wantUtil == -1 && d.Utilization != 0:
				t.Errorf("Utilization = %v, want 0 (unknown)", d.Utilization)
			case tt.wantUtil > 0 && !nearlyEqual(d.Utilization, tt.wantUtil):
				t.Errorf("Utilization = %v, want %v", d.Utilization, tt.wantUtil)
			}
			if !tt.w.countersReverse && tt.interval == 0 &&
				(d.AcquireTimeouts != tt.w.timeouts || d.QueueFull != tt.w.full) {
				t.Errorf("AcquireTimeouts, QueueFull = %d, %d, want %d, %d", d.AcquireTimeouts, d.QueueFull, tt.w.timeouts, tt.w.full)
			}
			if tt.wantReason != "" && !strings.Contains(strings.Join(d.Reasons, "\n"), tt.wantReason) {
				t.Errorf("no reason contains %q", tt.wantReason)
			}
			if len(d.Reasons) == 0 || d.Advice == "" {
				t.Errorf("Reasons %q, Advice %q: want both", d.Reasons, d.Advice)
			}
			wantAdvice := map[Verdict]string{VerdictHealthy: "no action", VerdictTimeoutStorm: "do NOT grow the pool", VerdictTrafficSpike: "more capacity"}[tt.want]
			if !strings.Contains(d.Advice, wantAdvice) {
				t.Errorf("Advice = %q, want it to contain %q", d.Advice, wantAdvice)
			}
		})
	}
}

func nearlyEqual(got, want float64) bool {
	return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want))
}

// TestDiagnosePoolSize reads MaxConns from Stats.Pool when the config has
// none, and prefers the config's when both are there. The pool never
// connects: pgxpool opens connections on demand.
func TestDiagnosePoolSize(t *testing.T) {
	cfg, err := ParseConfig("postgres://pgtx@127.0.0.1:1/none?pool_max_conns=5")
	if err != nil {
		t.Fatal(err)
	}
	cfg.CancelMode = CancelModeProtocol // no cancel pool to open
	pool, err := NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	before, after := diagSnapshots(t, stormWindow)
	after.Pool = pool.Stats().Pool
	for _, tt := range []struct {
		cfg  DiagnoseConfig
		want int32
	}{{DiagnoseConfig{}, 5}, {DiagnoseConfig{MaxConns: 4}, 4}} {
		d := Diagnose(before, after, 10*time.Second, tt.cfg)
		if d.MaxConns != tt.want || !nearlyEqual(d.Utilization, 40*0.3/float64(tt.want)) {
			t.Errorf("cfg.MaxConns %d: MaxConns, Utilization = %d, %v, want %d, %v", tt.cfg.MaxConns, d.MaxConns, d.Utilization, tt.want, 40*0.3/float64(tt.want))
		}
	}
}

func TestVerdictString(t *testing.T) {
	for v, want := range map[Verdict]string{
		VerdictHealthy: "healthy", VerdictTimeoutStorm: "timeout storm", VerdictTrafficSpike: "traffic spike", Verdict(9): "Verdict(9)",
	} {
		if got := v.String(); got != want {
			t.Errorf("Verdict(%d).String() = %q, want %q", int(v), got, want)
		}
	}
}

func TestDiagnosisString(t *testing.T) {
	before, after := diagSnapshots(t, stormWindow)
	got := Diagnose(before, after, 10*time.Second, DiagnoseConfig{MaxConns: 4}).String()
	want := "timeout storm: arrival 40.0/s, mean hold 300ms, queue depth 20, mean acquire wait 450ms, acquire timeouts 247, utilization 3.00 of 4 conns, oldest in flight 290ms"
	if got != want {
		t.Errorf("String() =\n%s\nwant\n%s", got, want)
	}
}
