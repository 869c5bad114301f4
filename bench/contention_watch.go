package main

import (
	"fmt"
	"slices"

	"github.com/pgtx-go/pgtx"
)

// managerWatch follows the contention manager of a pgtx pool (the label of
// each cell's calls) over the slices of the cells that run on it.
type managerWatch struct {
	pool  *pgtx.Pool
	cells map[int]*managerCell
}

// managerCell is what the manager did during one cell's slices.
type managerCell struct {
	label               string
	seen                bool
	end                 pgtx.ContentionStats // after the cell's last slice
	wait                pgtx.Histogram       // the gate's waits during its slices
	attempts, conflicts int64
}

func newManagerWatch(p *pgtx.Pool) *managerWatch {
	return &managerWatch{pool: p, cells: map[int]*managerCell{}}
}

// follow adds a cell to watch, whose calls carry label.
func (w *managerWatch) follow(cell int, label string) { w.cells[cell] = &managerCell{label: label} }

// observe is runTransfers' hook: called before a slice of cell, it returns
// what records the manager's change over the slice.
func (w *managerWatch) observe(cell int) (done func()) {
	mc := w.cells[cell]
	if mc == nil {
		return func() {}
	}
	before, ok := labelGate(w.pool, mc.label)
	if !ok {
		return func() {}
	}
	return func() {
		after, ok := labelGate(w.pool, mc.label)
		if !ok {
			return
		}
		mc.seen = true
		mc.end = after
		mc.wait = histAdd(mc.wait, histSub(after.Wait, before.Wait))
		mc.attempts += after.AttemptCount - before.AttemptCount
		mc.conflicts += after.ConflictCount - before.ConflictCount
	}
}

// state is the manager's state for cell, nil when it was not watched or
// the pool has no manager.
func (w *managerWatch) state(cell int) *managerState {
	mc := w.cells[cell]
	if mc == nil || !mc.seen {
		return nil
	}
	s := &managerState{
		Limiting: mc.end.Limiting, Limit: mc.end.Limit, Admitted: mc.wait.Count,
		WaitP99ms:     msf(mc.wait.Quantile(.99)),
		ConflictShare: ratio(float64(mc.conflicts), float64(mc.attempts)),
	}
	s.Summary = "not limiting"
	if s.Limiting {
		s.Summary = "limiting, limit " + itoa(s.Limit)
	}
	if s.Admitted == 0 {
		s.Summary += "; no attempt passed the gate"
	} else {
		s.Summary += fmt.Sprintf("; %s attempts passed the gate, wait p99 ≤ %s ms", num(float64(s.Admitted)), ms(mc.wait.Quantile(.99)))
	}
	s.Summary += fmt.Sprintf("; %s of attempts conflicted", pct(s.ConflictShare))
	return s
}

// labelGate is the pool's contention state for label.
func labelGate(p *pgtx.Pool, label string) (pgtx.ContentionStats, bool) {
	for _, c := range p.Stats().Contention {
		if c.Label == label {
			return c, true
		}
	}
	return pgtx.ContentionStats{}, false
}

// histSub is a - b, bucket by bucket, for two snapshots of one histogram, b
// taken first. Max stays a's, which only matters above the last bound.
func histSub(a, b pgtx.Histogram) pgtx.Histogram {
	d := pgtx.Histogram{Count: a.Count - b.Count, Duration: a.Duration - b.Duration, Max: a.Max, Bounds: a.Bounds,
		Buckets: slices.Clone(a.Buckets)}
	if len(b.Buckets) == len(d.Buckets) {
		for i, n := range b.Buckets {
			d.Buckets[i] -= n
		}
	}
	return d
}

// histAdd is a + b, bucket by bucket; a may be the zero Histogram.
func histAdd(a, b pgtx.Histogram) pgtx.Histogram {
	if len(a.Buckets) == 0 {
		return b
	}
	s := pgtx.Histogram{Count: a.Count + b.Count, Duration: a.Duration + b.Duration, Max: max(a.Max, b.Max), Bounds: a.Bounds,
		Buckets: slices.Clone(a.Buckets)}
	if len(b.Buckets) == len(s.Buckets) {
		for i, n := range b.Buckets {
			s.Buckets[i] += n
		}
	}
	return s
}
