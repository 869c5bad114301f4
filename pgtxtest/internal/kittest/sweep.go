package kittest

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// Sweep is a base directory as a sweep of stale kit directories finds it:
// Dead is a directory of a process group that is gone, Mine one of this
// process, and Other one that another sweep owns.
type Sweep struct {
	Base, Dead, Mine, Other string
}

// NewSweep makes, in a temporary base directory, the directories prefix
// names for a gone process group and for this process, and other.
func NewSweep(t testing.TB, prefix, other string) Sweep {
	t.Helper()
	base := t.TempDir()
	s := Sweep{
		Base:  base,
		Dead:  filepath.Join(base, prefix+"999999999-1"),
		Mine:  filepath.Join(base, prefix+strconv.Itoa(os.Getpid())+"-1"),
		Other: filepath.Join(base, other),
	}
	for _, dir := range []string{s.Dead, s.Mine, s.Other} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// Check fails the test unless the sweep removed Dead and kept Mine and Other.
func (s Sweep) Check(t testing.TB) {
	t.Helper()
	for dir, wantGone := range map[string]bool{s.Dead: true, s.Mine: false, s.Other: false} {
		_, err := os.Stat(dir)
		if gone := os.IsNotExist(err); gone != wantGone {
			t.Errorf("%s: removed %v, want %v", filepath.Base(dir), gone, wantGone)
		}
	}
}
