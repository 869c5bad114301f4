package txn

import (
	"errors"
	"testing"

	"github.com/pgtx-go/pgtx/internal/classify"
	"github.com/pgtx-go/pgtx/internal/errs"
	"github.com/pgtx-go/pgtx/internal/resolve"
)

// TestNotResolvable: a lost COMMIT that cannot be asked about is
// ErrCommitUnknown, saying why, and counted as unsupported.
func TestNotResolvable(t *testing.T) {
	tests := []struct {
		name string
		kind Kind
		why  string
	}{
		{"uncaptured", Uncaptured, "the server cannot be asked: resolution needs pg_xact_status (PostgreSQL 13 or later)"},
		{"on a promoted standby's connection", OnPromoted, "the connection was made to a standby since promoted: the server's run was not captured"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Settings{Counters: &resolve.Counters{}}
			lost := errors.New("eof")
			c, err := notResolvable(s, nil, tt.kind, &errs.CommitUnknownError{Err: lost})
			var cu *errs.CommitUnknownError
			if c != classify.Ambiguous || !errors.As(err, &cu) || cu.Why != tt.why || !errors.Is(err, lost) {
				t.Errorf("notResolvable = %v, %v", c, err)
			}
			if s.Counters.Unknown.Load() != 1 || s.Counters.Unsupported.Load() != 1 {
				t.Errorf("counted unknown %d, unsupported %d; want 1, 1", s.Counters.Unknown.Load(), s.Counters.Unsupported.Load())
			}
		})
	}
}
