package server

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/pgbin"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

// Test binaries that start at once build the template once, in a directory that
// appears whole.
func TestLocalTemplateBuiltOnce(t *testing.T) {
	bindir, err := pgbin.Find()
	if err != nil {
		if proc.IsCI(os.Getenv) {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	cred, err := proc.Credential()
	if err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp("", "pgtx-pgtest-tmpdir-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o755); err != nil { // the postgres user must reach into it
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", tmp)

	const builders = 3
	dirs := make([]string, builders)
	errs := make([]error, builders)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range builders {
		wg.Go(func() { dirs[i], errs[i] = ensureTemplate(context.Background(), bindir, cred) })
	}
	wg.Wait()
	t.Logf("%d concurrent ensureTemplate calls on an empty cache took %v (one initdb)", builders, time.Since(start))
	for i := range builders {
		if errs[i] != nil {
			t.Fatalf("ensureTemplate: %v", errs[i])
		}
		if dirs[i] != dirs[0] {
			t.Fatalf("ensureTemplate returned %q and %q", dirs[0], dirs[i])
		}
	}
	if filepath.Dir(dirs[0]) != tmp {
		t.Errorf("template %s is not in os.TempDir() %s", dirs[0], tmp)
	}
	entries, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	sort.Strings(names)
	want := []string{filepath.Base(dirs[0]), filepath.Base(dirs[0]) + ".lock"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("%s holds %q, want %q (no leftover build directories)", tmp, names, want)
	}

	// A broken template (an interrupted copy by hand, say) is rebuilt.
	if err := os.Remove(filepath.Join(dirs[0], "PG_VERSION")); err != nil {
		t.Fatal(err)
	}
	if _, err := ensureTemplate(context.Background(), bindir, cred); err != nil {
		t.Fatalf("ensureTemplate over a broken template: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dirs[0], "PG_VERSION")); err != nil {
		t.Errorf("broken template not rebuilt: %v", err)
	}
}

func TestLocalLockFileIsExclusiveAndBounded(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.lock")
	unlock, err := lockFile(context.Background(), path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := lockFile(context.Background(), path, 200*time.Millisecond); err == nil {
		t.Error("a second lock succeeded while the first was held")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("waiting for a held lock took %v, bound 200ms", took)
	}
	unlock()
	unlock2, err := lockFile(context.Background(), path, time.Second)
	if err != nil {
		t.Fatalf("lock after release: %v", err)
	}
	unlock2()
}
