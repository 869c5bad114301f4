// Package failcode holds the SQLSTATEs the fault proxy can make a COMMIT fail with.
package failcode

import "fmt"

// Messages are the SQLSTATEs that the proxy injects at COMMIT, with the message of
// each.
var Messages = map[string]string{
	"40001": "pgtxtest: injected serialization failure at COMMIT",
	"40P01": "pgtxtest: injected deadlock at COMMIT",
}

// Check says why code cannot be injected at COMMIT, if it cannot.
func Check(code string) error {
	if _, ok := Messages[code]; ok {
		return nil
	}
	return fmt.Errorf("SQLSTATE %q cannot be injected at COMMIT: use 40001 (serialization_failure) or 40P01 "+
		"(deadlock_detected), the failures with which a COMMIT ends its transaction and a retry can succeed", code)
}
