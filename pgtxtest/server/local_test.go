package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/kittest"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

func TestLocalSweepsDeadBinariesClusters(t *testing.T) {
	t.Parallel()
	sw := kittest.NewSweep(t, "pgtx-pgtest-cluster-", "pgtx-pgtest-template-15-x-0")
	sweepStaleClusters(sw.Base)
	sw.Check(t)
}

func TestLocalWaitReady(t *testing.T) {
	t.Parallel()
	s := startLocalForTest(t, nil)
	closedPort, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	nowhere := (&localCluster{port: closedPort}).dsn().String()
	running := &proc.Process{Done: make(chan struct{})}
	exited := &proc.Process{Done: make(chan struct{}), WaitErr: errors.New("exit status 1")}
	close(exited.Done)

	tests := []struct {
		name    string
		dsn     string
		dataDir string
		p       *proc.Process
		wantErr error  // errors.Is target, nil for success
		wantMsg string // when wantErr is not a sentinel
	}{
		{name: "ours answers", dsn: s.DSN(""), dataDir: s.local.dataDir(), p: running},
		{name: "another server has the port", dsn: s.DSN(""), dataDir: "/elsewhere/data", p: running, wantErr: proc.ErrPortTaken},
		{name: "process exited", dsn: nowhere, dataDir: "/x", p: exited, wantMsg: "exited (exit status 1)"},
		{name: "nothing answers in time", dsn: nowhere, dataDir: "/x", p: running, wantErr: context.DeadlineExceeded},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			start := time.Now()
			err := proc.WaitPostgres(context.Background(), tc.dsn, tc.dataDir, tc.p, 300*time.Millisecond)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("waitReady took %v, bound 300ms", took)
			}
			switch {
			case tc.wantErr == nil && tc.wantMsg == "":
				if err != nil {
					t.Errorf("waitReady = %v", err)
				}
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Errorf("waitReady = %v, want %v", err, tc.wantErr)
				}
			default:
				if err == nil || !strings.Contains(err.Error(), tc.wantMsg) {
					t.Errorf("waitReady = %v, want %q", err, tc.wantMsg)
				}
			}
		})
	}
}
