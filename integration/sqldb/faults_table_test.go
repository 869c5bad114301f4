package sqldb

import (
	"testing"
	"time"
)

// Bounds of the fault table's tests.
const (
	// lockDeadline is the deadline of a transaction that sleeps on the
	// server holding a row lock, sleepSQL its sleep: long enough that a
	// statement left running shows, short enough to end the test soon.
	lockDeadline = 400 * time.Millisecond
	sleepSQL     = "select pg_sleep(3)"
	// lockRounds is how many times pgtx's modules meet the deadline at
	// least; up to maxLockRounds while none released the lock within
	// releaseBound (a loaded machine delays this process's ROLLBACK).
	lockRounds, maxLockRounds = 4, 10
	// releaseBound is how soon after the deadline the issue wants the lock
	// released, on the server's clock.
	releaseBound = 10 * time.Millisecond
	// outageFor is how long the server refuses connections.
	outageFor = 1500 * time.Millisecond
)

// faults are the faults, each run against every way.
var faults = []struct {
	name string
	run  func(t *testing.T, c cell, w way)
	// serial runs the ways one after the other: what is measured is the
	// way's, not the machine's other work.
	serial bool
}{
	{"40001 at COMMIT", faultCommitConflict, false},
	{"lost COMMIT answer", faultLostCommit, false},
	{"deadline in pg_sleep, row lock held", faultDeadline, true},
	{"connections refused", faultRefused, false},
	{"PgBouncer, transaction mode", faultBouncer, false},
}

// TestFaultTable runs the faults against the own ways of
// database/sql (a hand-written retry loop), sqlx (the same loop) and GORM
// (db.Transaction), and against pgtx's modules for them, on real
// PostgreSQL through the fault kit. Each way's outcome is asserted: the
// own ways' failures as observed, pgtx's modules correct. The table is
// logged at the end.
func TestFaultTable(t *testing.T) {
	ft := &faultTable{}
	t.Cleanup(func() { t.Log("fault table:\n" + ft.String()) })
	for fi, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			for wi, w := range ways {
				t.Run(w.String(), func(t *testing.T) {
					if !f.serial {
						t.Parallel()
					}
					f.run(t, cell{ft, fi, wi, f.name}, w)
				})
			}
		})
	}
}
