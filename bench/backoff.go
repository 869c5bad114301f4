package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/pgtx-go/pgtx"
)

// backoffSetting is one pgtx conflict backoff to try: RetryConfig's
// ConflictBaseBackoff and ConflictMaxBackoff.
type backoffSetting struct {
	Base time.Duration `json:"base_ns"`
	Max  time.Duration `json:"max_ns"`
}

// String is "base/max", as the -sweep flag takes it.
func (b backoffSetting) String() string { return b.Base.String() + "/" + b.Max.String() }

// parseSweep parses "2ms/100ms,5ms/500ms".
func parseSweep(s string) ([]backoffSetting, error) {
	var out []backoffSetting
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		a, b, ok := strings.Cut(part, "/")
		if !ok {
			return nil, fmt.Errorf("%q: want base/max, e.g. 2ms/100ms", part)
		}
		base, err1 := time.ParseDuration(a)
		ceil, err2 := time.ParseDuration(b)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("%q: %w", part, err)
		}
		if base <= 0 || ceil < base {
			return nil, fmt.Errorf("%q: want 0 < base <= max", part)
		}
		out = append(out, backoffSetting{base, ceil})
	}
	if len(out) == 0 {
		return nil, errors.New("no setting")
	}
	return out, nil
}

// maxSweep bounds the settings of one run: each gets its own pool of up to 32
// connections, next to the loops' pool, within the server's max_connections.
const maxSweep = 4

// backoffRow is pgtx with one conflict backoff on one variant, next to the
// full-jitter loop measured in the same interleaved rounds.
type backoffRow struct {
	Workers int            `json:"workers"`
	Setting backoffSetting `json:"setting"`
	Pgtx    contentionRow  `json:"pgtx"`
	Jitter  contentionRow  `json:"full_jitter"`
}

// backoffSweep is the side experiment on pgtx's conflict backoff: at each
// worker count, pgtx with each -sweep setting (a pool each), the full-jitter
// loop and the ceiling run interleaved on both transfer variants, all in the
// same rounds. The library is not changed: the settings go through
// pgtx.Config.
func backoffSweep(ctx context.Context, e *env) (result, error) {
	if len(e.opts.sweep) > maxSweep {
		return result{}, fmt.Errorf("-sweep: at most %d settings per run, got %d", maxSweep, len(e.opts.sweep))
	}
	if err := setupAccounts(ctx, e.admin, hotAccounts); err != nil {
		return result{}, err
	}
	restore := setDeadlockTimeout(ctx, e)
	defer restore()
	var rows []backoffRow
	for _, workers := range []int{8, 32} {
		r, err := sweepAt(ctx, e, workers)
		if err != nil {
			return result{}, err
		}
		rows = append(rows, r...)
	}
	t := table{
		Title: "Side experiment: pgtx's conflict backoff (RetryConfig.ConflictBaseBackoff / ConflictMaxBackoff)",
		Note: "pgtx with each setting, the full-jitter loop (5ms base, 500ms cap) and the READ COMMITTED ceiling ran " +
			"interleaved in the same rounds at each worker count. pgtx's pause before retry n (from 1) is " +
			"rand × min(max, base × 2^n); failed calls are calls that lost 11 attempts in a row.",
		Header: []string{"workers", "variant", "contender", "commits/s", "× full-jitter", "of ceiling",
			"attempts/commit", "failed calls", "p50 ms", "p99 ms"},
	}
	for _, workers := range []int{8, 32} {
		for _, variant := range []string{variantOrdered, variantRandom} {
			first := true
			for _, r := range rows {
				if r.Workers != workers || r.Pgtx.Variant != variant {
					continue
				}
				if first {
					first = false
					j := r.Jitter
					t.Rows = append(t.Rows, []string{itoa(workers), variant, "full-jitter loop", num(j.CommitsPerS), "1.00×",
						pct(j.OfCeiling), fmtf(j.AttemptsPerCommit, 2), itoa64(j.Failed), fmtf(j.P50ms, 2), fmtf(j.P99ms, 1)})
				}
				p := r.Pgtx
				t.Rows = append(t.Rows, []string{itoa(workers), variant, "pgtx " + r.Setting.String(), num(p.CommitsPerS), x(p.VsJitter),
					pct(p.OfCeiling), fmtf(p.AttemptsPerCommit, 2), itoa64(p.Failed), fmtf(p.P50ms, 2), fmtf(p.P99ms, 1)})
			}
		}
	}
	return result{Tables: []table{t}, Data: rows}, nil
}

// sweepAt runs the sweep at one worker count.
func sweepAt(ctx context.Context, e *env, workers int) ([]backoffRow, error) {
	xp, err := newPgxPool(ctx, e.dsn, workers, nil)
	if err != nil {
		return nil, err
	}
	defer xp.Close()
	pools := []execFunc{xp.Exec}
	jit := jitterContender(nameJitter, xp, loopMaxRetries)
	var cells []transferCell
	for _, set := range e.opts.sweep {
		tp, err := newPgtxPool(ctx, e.dsn, workers, func(c *pgtx.Config) {
			c.Retry.ConflictBaseBackoff, c.Retry.ConflictMaxBackoff = set.Base, set.Max
		})
		if err != nil {
			return nil, err
		}
		defer tp.Close()
		pools = append(pools, tp.Exec)
		pg := pgtxContender("pgtx "+set.String(), tp)
		cells = append(cells, transferCell{variant: variantOrdered, c: pg}, transferCell{variant: variantRandom, c: pg})
	}
	cells = append(cells, transferCell{variant: variantOrdered, c: jit}, transferCell{variant: variantRandom, c: jit},
		transferCell{variant: variantCeiling, c: beginContender(nameCeiling, xp)})
	stats, err := runTransfers(ctx, e, workers, hotAccounts, cells, pools, nil)
	if err != nil {
		return nil, err
	}
	cr := contentionRows(workers, hotAccounts, cells, stats)
	n := len(e.opts.sweep)
	rows := make([]backoffRow, 0, 2*n)
	for k, set := range e.opts.sweep {
		rows = append(rows, backoffRow{workers, set, cr[2*k], cr[2*n]}, backoffRow{workers, set, cr[2*k+1], cr[2*n+1]})
	}
	return rows, nil
}
