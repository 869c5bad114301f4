package pgpool

import (
	"slices"
	"testing"
)

// TestAdvice: each setting a guarantee needs otherwise is named with the
// value pgtx needs, in order, and settings that are fine or absent are not.
func TestAdvice(t *testing.T) {
	tests := []struct {
		name     string
		settings map[string]string
		want     []string
	}{
		{"pgpool's defaults", map[string]string{"failover_on_backend_error": "on", "failover_on_backend_shutdown": "on",
			"disable_load_balance_on_write": "transaction", "statement_level_load_balance": "off"},
			[]string{"failover_on_backend_error=off", "failover_on_backend_shutdown=off"}},
		{"as pgtx needs", map[string]string{"failover_on_backend_error": "off", "failover_on_backend_shutdown": "off",
			"disable_load_balance_on_write": "always", "statement_level_load_balance": "off"}, nil},
		{"writes that do not pin", map[string]string{"disable_load_balance_on_write": "dml_adaptive"},
			[]string{"disable_load_balance_on_write=transaction"}},
		{"statements balanced one by one", map[string]string{"statement_level_load_balance": "on"},
			[]string{"statement_level_load_balance=off"}},
		{"nothing said", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, a := range (Info{Settings: tt.settings}).Advice() {
				if a.Why == "" || a.Value != tt.settings[a.Setting] {
					t.Errorf("advice %+v: no why, or not the setting's value", a)
				}
				got = append(got, a.Setting+"="+a.Want)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("advice %q, want %q", got, tt.want)
			}
		})
	}
}

// TestBalancesStatements: only statement_level_load_balance on says that
// each statement may go to another node.
func TestBalancesStatements(t *testing.T) {
	for v, want := range map[string]bool{"on": true, "off": false, "": false} {
		if got := (Info{Settings: map[string]string{"statement_level_load_balance": v}}).BalancesStatements(); got != want {
			t.Errorf("statement_level_load_balance %q: %v, want %v", v, got, want)
		}
	}
}
