package pgtxslog_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/pgtx-go/pgtx/pooler"
)

// TestTracePooler: each setting of the pooler a pool found that pgtx needs
// otherwise is a Warn line with the pooler, its version, the setting's
// value, the value pgtx needs and why; a pooler with none is one Info
// line.
func TestTracePooler(t *testing.T) {
	t.Parallel()
	h, tr := newRecorder(slog.LevelDebug, nil)
	tr.TracePooler(context.Background(), pooler.Data{Name: "Pgpool-II", Version: "4.3.5 (tamahomeboshi)", Advice: []pooler.Advice{
		{Setting: "failover_on_backend_error", Value: "on", Want: "off", Why: "a restart detaches the primary"},
	}})
	tr.TracePooler(context.Background(), pooler.Data{Name: "Pgpool-II", Version: "4.4.2"})
	assertLines(t, h,
		line{slog.LevelWarn, "pooler setting", map[string]string{"pooler": "Pgpool-II", "version": "4.3.5 (tamahomeboshi)",
			"setting": "failover_on_backend_error", "value": "on", "want": "off", "why": "a restart detaches the primary"}},
		line{slog.LevelInfo, "pooler found", map[string]string{"pooler": "Pgpool-II", "version": "4.4.2"}})
}
