package kittest

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

// TakenPort listens on a free local port until the test ends and returns it.
func TakenPort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// ProgramDir makes a directory in proc.BaseDir named as a kit program's own:
// prefix, this process's id and a unique tail. The test removes it at
// cleanup.
func ProgramDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp(proc.BaseDir(), prefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// CheckPortTaken fails the test unless err, what a start on a taken port
// returned, is proc.ErrPortTaken, and the start left no process recorded.
func CheckPortTaken(t testing.TB, err error, recorded bool) {
	t.Helper()
	if !errors.Is(err, proc.ErrPortTaken) {
		t.Fatalf("start on a taken port = %v, want proc.ErrPortTaken", err)
	}
	if recorded {
		t.Error("the failed start left its process recorded")
	}
}

// CheckConfigError fails the test unless err, what a start refused for its
// settings returned, starts with "pgtxtest: " and says want, and, if invalid,
// matches pgtx.ErrInvalidArgument.
func CheckConfigError(t testing.TB, err error, want string, invalid bool) {
	t.Helper()
	if !strings.HasPrefix(err.Error(), "pgtxtest: ") || !strings.Contains(err.Error(), want) {
		t.Errorf("error %q, want one starting with \"pgtxtest: \" that says %q", err, want)
	}
	if invalid && !errors.Is(err, pgtx.ErrInvalidArgument) {
		t.Errorf("error %q does not wrap pgtx.ErrInvalidArgument", err)
	}
}
