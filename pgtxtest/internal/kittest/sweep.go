package kittest

import (
	"os"
	"path/filepath"
	"testing"
)

// MakeDirs creates each of dirs.
func MakeDirs(t testing.TB, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
	}
}

// CheckRemoved fails the test unless each directory of want is gone where its
// value is true and still there where it is false.
func CheckRemoved(t testing.TB, want map[string]bool) {
	t.Helper()
	for dir, wantGone := range want {
		_, err := os.Stat(dir)
		if gone := os.IsNotExist(err); gone != wantGone {
			t.Errorf("%s: removed %v, want %v", filepath.Base(dir), gone, wantGone)
		}
	}
}
