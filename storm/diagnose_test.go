package storm

import (
	"context"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgtx-go/pgtx"
)

// window is what happened to a pool between two snapshots, plus the instant
// readings of the second.
type window struct {
	transactions, held int64
	hold               time.Duration // mean hold of the held attempts
	acquires           int64
	wait               time.Duration // mean acquire wait
	timeouts, full     int64
	waiting            int64
	inFlight           int
	oldestInFlight     time.Duration
	countersReverse    bool // after's counters below before's
}

// history is a pool's counters before the window, so the tests check that
// Diagnose uses changes, not totals.
var history = pgtx.Stats{
	TransactionCount: 100_000, HeldCount: 99_000, HeldDuration: 99_000 * 3 * time.Millisecond,
	AcquireWait:         pgtx.Histogram{Count: 99_500, Duration: 99_500 * 50 * time.Microsecond},
	AcquireTimeoutCount: 7, QueueFullCount: 2,
}

// snapshots returns the before and after Stats of w.
func snapshots(t *testing.T, w window) (before, after pgtx.Stats) {
	t.Helper()
	before = history
	after = pgtx.Stats{
		TransactionCount: before.TransactionCount + w.transactions,
		HeldCount:        before.HeldCount + w.held,
		HeldDuration:     before.HeldDuration + time.Duration(w.held)*w.hold,
		AcquireWait: pgtx.Histogram{
			Count:    before.AcquireWait.Count + w.acquires,
			Duration: before.AcquireWait.Duration + time.Duration(w.acquires)*w.wait,
		},
		AcquireTimeoutCount: before.AcquireTimeoutCount + w.timeouts,
		QueueFullCount:      before.QueueFullCount + w.full,
		Waiting:             w.waiting,
		InFlight:            w.inFlight,
		OldestInFlight:      w.oldestInFlight,
	}
	if w.countersReverse {
		before, after = after, before
		after.Waiting, after.InFlight, after.OldestInFlight = w.waiting, w.inFlight, w.oldestInFlight
		before.Waiting, before.InFlight, before.OldestInFlight = 0, 0, 0
	}
	return before, after
}

// The crafted runs, over a 10s interval on a pool of 4 connections.
var (
	// stormWindow: a timeout storm. A normal 40 transactions a second, but
	// every transaction holds its connection 300ms: 4 conns serve 13/s, the
	// rest wait and time out.
	stormWindow = window{transactions: 400, held: 133, hold: 300 * time.Millisecond, acquires: 380, wait: 450 * time.Millisecond,
		timeouts: 247, waiting: 20, inFlight: 4, oldestInFlight: 290 * time.Millisecond}
	// spikeWindow: 2000 transactions a second of 2ms each: fast, but 4 conns
	// serve 2000/s at best.
	spikeWindow = window{transactions: 20_000, held: 19_990, hold: 2 * time.Millisecond, acquires: 19_990, wait: 30 * time.Millisecond,
		waiting: 50, inFlight: 4, oldestInFlight: 3 * time.Millisecond}
	// healthyWindow: 100 transactions a second of 5ms each, no waiting.
	healthyWindow = window{transactions: 1000, held: 1000, hold: 5 * time.Millisecond, acquires: 1000, wait: 10 * time.Microsecond,
		inFlight: 1, oldestInFlight: 2 * time.Millisecond}
)

func TestDiagnose(t *testing.T) {
	const interval = 10 * time.Second
	four := Config{MaxConns: 4}
	withBaseline := func(arrival float64, hold time.Duration) Config {
		return Config{MaxConns: 4, BaselineArrivalRate: arrival, BaselineHold: hold}
	}
	tests := []struct {
		name     string
		w        window
		interval time.Duration // 0: interval; -1: 0
		cfg      Config
		want     Verdict
		// figures checked when non-zero (wantUtil: -1 means exactly 0)
		wantArrival float64
		wantHold    time.Duration
		wantWait    time.Duration
		wantUtil    float64
		wantReason  string // a substring of one of the Reasons
	}{
		{name: "storm", w: stormWindow, cfg: four, want: TimeoutStorm,
			wantArrival: 40, wantHold: 300 * time.Millisecond, wantWait: 450 * time.Millisecond, wantUtil: 3,
			wantReason: "held by slow queries"},
		{name: "storm against baselines", w: stormWindow, cfg: withBaseline(38, 20*time.Millisecond), want: TimeoutStorm,
			wantReason: "1.1× the baseline"},
		{name: "storm below SlowHold but 3x the baseline hold",
			w:   window{transactions: 400, held: 390, hold: 80 * time.Millisecond, acquires: 400, wait: 40 * time.Millisecond, waiting: 3},
			cfg: withBaseline(40, 20*time.Millisecond), want: TimeoutStorm, wantUtil: 0.8,
			wantReason: "3× the baseline hold 20ms"},
		{name: "slow with high arrivals too is still a storm",
			w:   window{transactions: 4000, held: 300, hold: 250 * time.Millisecond, acquires: 3000, wait: time.Second, timeouts: 2700, waiting: 40},
			cfg: withBaseline(100, 0), want: TimeoutStorm, wantReason: "arrivals are high too"},
		{name: "spike", w: spikeWindow, cfg: four, want: TrafficSpike,
			wantArrival: 2000, wantHold: 2 * time.Millisecond, wantWait: 30 * time.Millisecond, wantUtil: 1,
			wantReason: "queries are fast"},
		{name: "spike against baselines", w: spikeWindow, cfg: withBaseline(500, 2*time.Millisecond), want: TrafficSpike,
			wantReason: "4.0× the baseline"},
		{name: "fast and saturated at the normal rate: pool too small", w: spikeWindow, cfg: withBaseline(1900, 0),
			want: TrafficSpike, wantReason: "too small for the normal load"},
		{name: "healthy", w: healthyWindow, cfg: four, want: Healthy,
			wantArrival: 100, wantHold: 5 * time.Millisecond, wantWait: 10 * time.Microsecond, wantUtil: 0.125,
			wantReason: "not saturated"},
		{name: "healthy against baselines", w: healthyWindow, cfg: withBaseline(100, 5*time.Millisecond), want: Healthy},
		{name: "healthy slow pool: slow holds alone are not saturation",
			w:   window{transactions: 20, held: 20, hold: time.Second, acquires: 20},
			cfg: four, want: Healthy, wantUtil: 0.5},
		{name: "utilization alone saturates",
			w:   window{transactions: 4000, held: 4000, hold: 9500 * time.Microsecond, acquires: 4000, wait: time.Millisecond},
			cfg: four, want: TrafficSpike, wantUtil: 0.95, wantReason: "utilization 0.95"},
		{name: "queue-full refusals saturate",
			w:   window{transactions: 100, held: 50, hold: 400 * time.Millisecond, acquires: 50, full: 50},
			cfg: four, want: TimeoutStorm, wantReason: "50 calls refused"},
		{name: "acquire timeouts alone saturate",
			w:   window{transactions: 100, held: 99, hold: time.Millisecond, acquires: 100, wait: 2 * time.Millisecond, timeouts: 1},
			cfg: four, want: TrafficSpike, wantReason: "1 acquire timeouts"},
		{name: "long transactions: baseline hold above SlowHold, 1.2x is fast",
			w:   window{transactions: 100, held: 100, hold: 600 * time.Millisecond, acquires: 100, wait: 100 * time.Millisecond, waiting: 5},
			cfg: withBaseline(0, 500*time.Millisecond), want: TrafficSpike, wantReason: "3× the baseline hold 500ms"},
		{name: "long transactions: 3.2x the baseline hold is slow",
			w:   window{transactions: 100, held: 100, hold: 1600 * time.Millisecond, acquires: 100, wait: 100 * time.Millisecond, waiting: 5},
			cfg: withBaseline(0, 500*time.Millisecond), want: TimeoutStorm},
		{name: "explicit SlowHold",
			w:   window{transactions: 100, held: 100, hold: 300 * time.Millisecond, acquires: 100, wait: 100 * time.Millisecond, waiting: 5},
			cfg: Config{SlowHold: time.Second}, want: TrafficSpike, wantReason: "< 1s (SlowHold)"},
		{name: "negative SlowHold: only the baseline rule, 250ms is below 3x 100ms",
			w:   window{transactions: 100, held: 100, hold: 250 * time.Millisecond, acquires: 100, wait: 100 * time.Millisecond, waiting: 5},
			cfg: Config{SlowHold: -1, BaselineHold: 100 * time.Millisecond}, want: TrafficSpike, wantReason: "< 300ms (3× the baseline hold 100ms)"},
		{name: "negative SlowHold: a short baseline still counts",
			w:   window{transactions: 100, held: 100, hold: 50 * time.Millisecond, acquires: 100, wait: 100 * time.Millisecond, waiting: 5},
			cfg: Config{SlowHold: -1, BaselineHold: 10 * time.Millisecond}, want: TimeoutStorm, wantReason: ">= 30ms (3× the baseline hold 10ms)"},
		{name: "negative SlowHold and no baseline hold: the hold is not judged",
			w: spikeWindow, cfg: Config{MaxConns: 4, SlowHold: -time.Second}, want: TimeoutStorm, wantHold: 2 * time.Millisecond,
			wantReason: "SlowHold is negative and there is no BaselineHold"},
		{name: "negative SlowHold and no baseline hold, high arrivals: spike",
			w: spikeWindow, cfg: Config{MaxConns: 4, SlowHold: -1, BaselineArrivalRate: 400}, want: TrafficSpike,
			wantReason: "a spike"},
		{name: "no connection came back: the oldest in flight stands in",
			w:   window{transactions: 50, waiting: 46, inFlight: 4, oldestInFlight: 8 * time.Second},
			cfg: four, want: TimeoutStorm, wantUtil: 10, wantReason: "oldest hold in flight 8s"},
		{name: "hold unknown: storm is the safe default",
			w:   window{waiting: 3},
			cfg: four, want: TimeoutStorm, wantUtil: -1, wantReason: "hold time unknown"},
		{name: "hold unknown with high arrivals: spike",
			w:   window{transactions: 5000, waiting: 3},
			cfg: withBaseline(100, 0), want: TrafficSpike, wantReason: "hold time unknown"},
		{name: "no pool size: no utilization, other signals decide",
			w: stormWindow, cfg: Config{}, want: TimeoutStorm, wantUtil: -1},
		{name: "negative MaxConns: no utilization",
			w: stormWindow, cfg: Config{MaxConns: -1}, want: TimeoutStorm, wantUtil: -1},
		{name: "no transactions, nothing waits", w: window{}, cfg: four, want: Healthy, wantUtil: -1},
		{name: "zero interval: rates unknown, the queue still counts", w: spikeWindow, interval: -1, cfg: four,
			want: TrafficSpike, wantUtil: -1, wantHold: 2 * time.Millisecond, wantReason: "rates are unknown"},
		{name: "negative interval", w: stormWindow, interval: -time.Second, cfg: four,
			want: TimeoutStorm, wantUtil: -1, wantReason: "rates are unknown"},
		{name: "counters backwards, nothing waits", w: window{transactions: 10, held: 10, hold: time.Second, countersReverse: true},
			cfg: four, want: Healthy, wantUtil: -1, wantReason: "counters went backwards"},
		{name: "counters backwards, a stuck queue",
			w:   window{transactions: 10, held: 10, countersReverse: true, waiting: 9, inFlight: 4, oldestInFlight: 3 * time.Second},
			cfg: four, want: TimeoutStorm, wantUtil: -1, wantReason: "counters went backwards"},
		{name: "NaN and negative baselines are unknown", w: spikeWindow,
			cfg:  Config{MaxConns: 4, BaselineArrivalRate: math.NaN(), BaselineHold: -time.Second},
			want: TrafficSpike, wantReason: "default SlowHold"},
		{name: "infinite baseline arrival rate is unknown", w: spikeWindow,
			cfg:  Config{MaxConns: 4, BaselineArrivalRate: math.Inf(1)},
			want: TrafficSpike, wantReason: "default SlowHold"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, after := snapshots(t, tt.w)
			iv := tt.interval
			switch iv {
			case 0:
				iv = interval
			case -1:
				iv = 0
			}
			d := Diagnose(before, after, iv, &tt.cfg)
			t.Logf("%v\n\t%s", d, strings.Join(d.Reasons, "\n\t"))
			if d.Verdict != tt.want {
				t.Errorf("Verdict = %v, want %v", d.Verdict, tt.want)
			}
			if d.Interval != iv || d.Waiting != tt.w.waiting || d.InFlight != tt.w.inFlight || d.OldestInFlight != tt.w.oldestInFlight {
				t.Errorf("instant readings = %v/%d/%d/%v, want %v/%d/%d/%v", d.Interval, d.Waiting, d.InFlight, d.OldestInFlight,
					iv, tt.w.waiting, tt.w.inFlight, tt.w.oldestInFlight)
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
				(d.AcquireTimeoutCount != tt.w.timeouts || d.QueueFullCount != tt.w.full) {
				t.Errorf("AcquireTimeoutCount, QueueFullCount = %d, %d, want %d, %d",
					d.AcquireTimeoutCount, d.QueueFullCount, tt.w.timeouts, tt.w.full)
			}
			if tt.wantReason != "" && !strings.Contains(strings.Join(d.Reasons, "\n"), tt.wantReason) {
				t.Errorf("no reason contains %q", tt.wantReason)
			}
			if len(d.Reasons) == 0 || d.Advice == "" {
				t.Errorf("Reasons %q, Advice %q: want both", d.Reasons, d.Advice)
			}
			wantAdvice := map[Verdict]string{Healthy: "no action", TimeoutStorm: "do NOT grow the pool", TrafficSpike: "more capacity"}[tt.want]
			if !strings.Contains(d.Advice, wantAdvice) {
				t.Errorf("Advice = %q, want it to contain %q", d.Advice, wantAdvice)
			}
		})
	}
}

func nearlyEqual(got, want float64) bool {
	return math.Abs(got-want) <= 1e-9*math.Max(1, math.Abs(want))
}

func TestSlowThreshold(t *testing.T) {
	tests := []struct {
		name       string
		cfg        Config
		want       time.Duration
		wantWhy    string
		wantJudged bool
	}{
		{"zero config: the default", Config{}, defaultSlowHold, "default SlowHold", true},
		{"explicit SlowHold", Config{SlowHold: time.Second}, time.Second, "SlowHold", true},
		{"negative baseline is none", Config{BaselineHold: -time.Second}, defaultSlowHold, "default SlowHold", true},
		{"short baseline: 3x is below the default", Config{BaselineHold: 20 * time.Millisecond}, 60 * time.Millisecond, "3× the baseline hold 20ms", true},
		{"baseline whose 3x is above the default", Config{BaselineHold: 50 * time.Millisecond}, defaultSlowHold, "default SlowHold", true},
		{"baseline above SlowHold: only 3x", Config{BaselineHold: 500 * time.Millisecond}, 1500 * time.Millisecond, "3× the baseline hold 500ms", true},
		{"negative SlowHold with a baseline", Config{SlowHold: -1, BaselineHold: 50 * time.Millisecond}, 150 * time.Millisecond, "3× the baseline hold 50ms", true},
		{"negative SlowHold without a baseline", Config{SlowHold: -1}, 0, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, why, judged := slowThreshold(tt.cfg)
			if got != tt.want || why != tt.wantWhy || judged != tt.wantJudged {
				t.Errorf("slowThreshold = %v, %q, %v, want %v, %q, %v", got, why, judged, tt.want, tt.wantWhy, tt.wantJudged)
			}
		})
	}
}

// TestDiagnosePoolSize reads MaxConns from Stats.Pool when the config has
// none, prefers the config's when both are there, and estimates nothing with
// a negative one. The pool never connects: pgxpool opens connections on
// demand.
func TestDiagnosePoolSize(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://pgtx@127.0.0.1:1/none?pool_max_conns=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)

	before, after := snapshots(t, stormWindow)
	after.Pool = pool.Stat()
	tests := []struct {
		maxConns int32
		want     int32
	}{{0, 5}, {4, 4}, {-1, 0}}
	for _, tt := range tests {
		d := Diagnose(before, after, 10*time.Second, &Config{MaxConns: tt.maxConns})
		wantUtil := 0.0
		if tt.want > 0 {
			wantUtil = 40 * 0.3 / float64(tt.want)
		}
		if d.MaxConns != tt.want || !nearlyEqual(d.Utilization, wantUtil) {
			t.Errorf("Config.MaxConns %d: MaxConns, Utilization = %d, %v, want %d, %v",
				tt.maxConns, d.MaxConns, d.Utilization, tt.want, wantUtil)
		}
	}
}

func TestVerdictString(t *testing.T) {
	tests := []struct {
		v    Verdict
		want string
	}{
		{Healthy, "healthy"}, {TimeoutStorm, "timeout storm"}, {TrafficSpike, "traffic spike"},
		{Verdict(9), "Verdict(9)"}, {Verdict(-1), "Verdict(-1)"},
	}
	for _, tt := range tests {
		if got := tt.v.String(); got != tt.want {
			t.Errorf("Verdict(%d).String() = %q, want %q", int(tt.v), got, tt.want)
		}
	}
}

func TestDiagnosisString(t *testing.T) {
	before, after := snapshots(t, stormWindow)
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"with pool size", Config{MaxConns: 4},
			"timeout storm: arrival 40.0/s, mean hold 300ms, queue depth 20, mean acquire wait 450ms, acquire timeouts 247, utilization 3.00 of 4 conns, oldest in flight 290ms"},
		{"without pool size", Config{},
			"timeout storm: arrival 40.0/s, mean hold 300ms, queue depth 20, mean acquire wait 450ms, acquire timeouts 247, oldest in flight 290ms"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Diagnose(before, after, 10*time.Second, &tt.cfg).String(); got != tt.want {
				t.Errorf("String() =\n%s\nwant\n%s", got, tt.want)
			}
		})
	}
}

func TestRoundDuration(t *testing.T) {
	tests := []struct{ in, want time.Duration }{
		{1234 * time.Nanosecond, time.Microsecond},
		{1234567 * time.Nanosecond, 1200 * time.Microsecond},
		{1234567890 * time.Nanosecond, 1235 * time.Millisecond},
		{0, 0},
	}
	for _, tt := range tests {
		if got := roundDuration(tt.in); got != tt.want {
			t.Errorf("roundDuration(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
