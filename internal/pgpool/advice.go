package pgpool

import "github.com/pgtx-go/pgtx/pooler"

// setting is a Pgpool-II setting a guarantee of pgtx's depends on: the
// values that break it, the one pgtx needs, and why.
type setting struct {
	name string
	bad  []string
	want string
	why  string
}

// settings are checked in this order against PGPOOL SHOW ALL.
var settings = [...]setting{
	{"failover_on_backend_error", []string{"on"}, "off",
		"Pgpool-II detaches a node for good when a read or write to it fails, as one does while the primary restarts: with no failover_command to promote another, every call fails from then on"},
	{"failover_on_backend_shutdown", []string{"on"}, "off",
		"Pgpool-II detaches the primary for good when it shuts down, as it does to restart: with no failover_command to promote another, every call fails from then on"},
	{"disable_load_balance_on_write", []string{"off", "dml_adaptive"}, "transaction",
		"pgtx has Pgpool-II send every statement of a read-write transaction to the primary by making it a writing transaction at BEGIN; with this value a read of such a transaction may be answered by a standby"},
	{"statement_level_load_balance", []string{"on"}, "off",
		"the statements of a read-only transaction could each go to another node, so pgtx sends read-only transactions to the primary too: none is balanced"},
}

// Advice lists the settings of i that a guarantee of pgtx's needs
// otherwise.
func (i Info) Advice() []pooler.Advice {
	var out []pooler.Advice
	for _, s := range settings {
		v, ok := i.Settings[s.name]
		if !ok {
			continue
		}
		for _, b := range s.bad {
			if v == b {
				out = append(out, pooler.Advice{Setting: s.name, Value: v, Want: s.want, Why: s.why})
			}
		}
	}
	return out
}

// BalancesStatements reports statement_level_load_balance on: Pgpool-II
// may send each statement of a transaction to another node.
func (i Info) BalancesStatements() bool { return i.Settings["statement_level_load_balance"] == "on" }
