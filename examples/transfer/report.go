package main

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pgtx-go/pgtx"
)

// kind is what a loop gave up on, as the table counts it.
type kind int

// The kinds of failure, in the table's order.
const (
	kindConflict   kind = iota // 40001, 40P01
	kindTimeout                // the deadline (57014, a context error), or an interrupt
	kindConnection             // a connection lost, or one that could not be made
	kindUnknown                // pgtx.ErrCommitUnknown: the COMMIT's outcome could not be known
	kindOther                  // anything else
	numKinds
)

// kindNames name the kinds in the table.
func kindNames() [numKinds]string {
	return [numKinds]string{"conflict", "timeout", "conn lost", "unknown", "other"}
}

// kindOf returns the kind of err, a loop's final error (not nil).
func kindOf(err error) kind {
	if errors.As(err, new(insufficientFunds)) {
		return kindOther
	}
	switch pgtx.Classify(err) {
	case pgtx.ClassConflict:
		return kindConflict
	case pgtx.ClassTimeout:
		return kindTimeout
	case pgtx.ClassConnectionLost, pgtx.ClassUnavailable:
		return kindConnection
	case pgtx.ClassAmbiguous:
		return kindUnknown
	}
	return kindOther
}

// outcome is what became of one transfer, as its loop told it.
type outcome struct {
	t transferReq
	// done: the loop told its caller the transfer was done; unknown: it
	// said it could not know (pgtx.ErrCommitUnknown).
	done, unknown bool
	// gaveUp: the loop gave up (whatever it told), on an error of kind k.
	gaveUp   bool
	k        kind
	attempts int
	latency  time.Duration
}

// tally is one loop's row: its outcomes held against its books.
type tally struct {
	name                        string
	transfers, done, applied    int
	attempts                    int
	p99                         time.Duration
	gaveUp                      [numKinds]int
	unrun                       [numKinds]int // of gaveUp: no try ran before the loop gave up
	doubled, lost, hidden       int           // transfers
	doubledSum, lostSum, hidSum int64         // money
	stray                       int           // ledger entries of transfers never asked for
	cuts                        int64         // COMMIT answers the fault proxy lost
	b                           books
}

// judge holds outcomes against the books: a transfer is doubled when the
// ledger has it more than once, lost when the loop said done and the ledger
// does not have it, hidden when the loop said it failed (not unknown) and
// the ledger has it.
func judge(name string, outcomes []outcome, b books, cuts int64) tally {
	r := tally{name: name, transfers: len(outcomes), b: b, cuts: cuts}
	applied := maps.Clone(b.applied)
	var lat []time.Duration
	for _, o := range outcomes {
		n := applied[o.t.id]
		delete(applied, o.t.id)
		r.attempts += o.attempts
		if o.done {
			r.done++
		}
		if o.gaveUp {
			r.gaveUp[o.k]++
			if o.attempts == 0 {
				r.unrun[o.k]++
			}
		} else {
			lat = append(lat, o.latency)
		}
		amount := int64(o.t.amount)
		if n > 0 {
			r.applied++
		}
		if n > 1 {
			r.doubled++
			r.doubledSum += int64(n-1) * amount
		}
		switch {
		case o.done && n == 0:
			r.lost++
			r.lostSum += amount
		case !o.done && !o.unknown && n > 0:
			r.hidden++
			r.hidSum += amount
		}
	}
	r.stray = len(applied)
	slices.Sort(lat)
	if len(lat) > 0 {
		r.p99 = lat[(len(lat)-1)*99/100]
	}
	return r
}

// kept reports whether the loop kept the invariant: every transfer it said
// was done applied once, none it said failed applied, nothing else in the
// ledger, and balances that agree with it.
func (r tally) kept() bool {
	return r.doubled == 0 && r.lost == 0 && r.hidden == 0 && r.stray == 0 && r.b.drift == 0 && r.b.total == r.b.want
}

// writeTable writes the loops' rows, one under the other.
func writeTable(w io.Writer, rows []tally) {
	width := len("loop")
	for _, r := range rows {
		width = max(width, len(r.name))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%-*s\ttransfers\tdone\tapplied\ttries\tp99\tcut\t  doubled\tlost\thidden\t  %s\n", width, "loop", "failed")
	for _, r := range rows {
		tries := 0.0
		if r.transfers > 0 {
			tries = float64(r.attempts) / float64(r.transfers)
		}
		fmt.Fprintf(tw, "%-*s\t%d\t%d (%d%%)\t%d\t%.2f\t%v\t%s\t  %s\t%s\t%s\t  %s\n", width, r.name,
			r.transfers, r.done, percent(r.done, r.transfers), r.applied, tries, r.p99.Round(100*time.Microsecond), dash(int(r.cuts), ""),
			dash(r.doubled, fmt.Sprintf(" (+%d)", r.doubledSum)), dash(r.lost, fmt.Sprintf(" (-%d)", r.lostSum)),
			dash(r.hidden, fmt.Sprintf(" (%d)", r.hidSum)), r.failures())
	}
	_ = tw.Flush()
}

// failures lists what the loop gave up on, by kind, and how many of them
// before a first try (a deadline that passed while the transfer waited for a
// connection, or for its turn at a hot row).
func (r tally) failures() string {
	var f []string
	for k, name := range kindNames() {
		switch n, u := r.gaveUp[k], r.unrun[k]; {
		case u > 0:
			f = append(f, fmt.Sprintf("%s %d (%d before a try)", name, n, u))
		case n > 0:
			f = append(f, fmt.Sprintf("%s %d", name, n))
		}
	}
	if len(f) == 0 {
		return "-"
	}
	return strings.Join(f, ", ")
}

// percent is 100 n / of, rounded down; 0 when of is 0.
func percent(n, of int) int {
	if of == 0 {
		return 0
	}
	return 100 * n / of
}

// dash writes n, followed by more, or "-" for 0.
func dash(n int, more string) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprint(n) + more
}

// verdict is the last line: whether pgtx kept the invariant, and what the
// other loops did. kept is false only when pgtx ran and broke it.
func verdict(rows []tally) (line string, kept bool) {
	kept = true
	head := "pgtx did not run"
	var others []string
	for _, r := range rows {
		switch {
		case r.name != "pgtx":
			others = append(others, r.name+": "+r.damage())
		case r.kept():
			head = fmt.Sprintf("pgtx kept the invariant (%d reported done, each applied once; %d failed, none applied)",
				r.done, r.transfers-r.done)
		default:
			kept = false
			head = "pgtx BROKE the invariant: " + r.damage()
		}
	}
	if len(others) > 0 {
		head += "; " + strings.Join(others, "; ")
	}
	return head + ".", kept
}

// damage says what a loop did to the money.
func (r tally) damage() string {
	var d []string
	if r.doubled > 0 {
		d = append(d, fmt.Sprintf("%d applied twice (+%d)", r.doubled, r.doubledSum))
	}
	if r.lost > 0 {
		d = append(d, fmt.Sprintf("%d reported done, never applied (-%d)", r.lost, r.lostSum))
	}
	if r.hidden > 0 {
		d = append(d, fmt.Sprintf("%d reported failed, yet applied (%d)", r.hidden, r.hidSum))
	}
	if r.stray > 0 {
		d = append(d, fmt.Sprintf("%d in the ledger never asked for", r.stray))
	}
	if r.b.total != r.b.want || r.b.drift != 0 {
		d = append(d, fmt.Sprintf("total balance %d (want %d), %d accounts off their ledger", r.b.total, r.b.want, r.b.drift))
	}
	if len(d) == 0 {
		return "no transfer doubled, lost or hidden this time"
	}
	return strings.Join(d, ", ")
}

// footer says what the columns and each loop are, how many COMMIT answers
// each loop's proxy lost, and what pgtx did inside its calls.
func footer(w io.Writer, cs []*contender) {
	fmt.Fprintln(w, "done: reported done to the caller (of the transfers); applied: in the ledger; tries: runs of its statements per transfer,")
	fmt.Fprintln(w, "below 1 when transfers ran out of time before a first try (\"before a try\": waiting for a connection, or for their turn);")
	fmt.Fprintln(w, "p99: latency of those that committed; cut: COMMIT answers the fault proxy lost; doubled: applied twice;")
	fmt.Fprintln(w, "lost: reported done, never applied; hidden: reported failed, yet applied (money in brackets)")
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, c := range cs {
		if c.ran {
			fmt.Fprintf(tw, "%s\t%s\n", c.name, strings.ReplaceAll(c.does, "\n", "\n\t"))
		}
	}
	_ = tw.Flush()
	for _, c := range cs {
		if !c.ran || c.retries == nil {
			continue
		}
		r, s := &c.retries.byClass, c.stats
		fmt.Fprintf(w, "pgtx inside: retried %d conflicts, %d lost connections, %d overloads; cancelled %d statements on the server;\n"+
			"  asked about %d lost COMMIT answers: %d committed, %d not committed, %d unknown\n",
			r[pgtx.ClassConflict].Load(), r[pgtx.ClassConnectionLost].Load(), r[pgtx.ClassOverload].Load(), s.Cancels.SignalledCount,
			s.Resolved.CommittedCount+s.Resolved.AbortedCount+s.Resolved.NotAppliedCount+s.Resolved.UnknownCount,
			s.Resolved.CommittedCount, s.Resolved.AbortedCount+s.Resolved.NotAppliedCount, s.Resolved.UnknownCount)
	}
}

// showProgress prints the transfers the loop reported done so far, on one
// line redrawn every half second, until stop is closed.
func (c *contender) showProgress(stop <-chan struct{}) {
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	start := time.Now()
	for {
		select {
		case <-stop:
			fmt.Print("\r\033[K")
			return
		case <-t.C:
			fmt.Printf("\r%s: %4.1fs, %d done", c.name, time.Since(start).Seconds(), c.done.Load())
		}
	}
}
