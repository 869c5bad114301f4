package proc

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/pgtx-go/pgtx"
)

var SettingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// ValidateSettings checks that settings are valid names with values the server can take.
func ValidateSettings(settings map[string]string) error {
	for name, value := range settings {
		if !SettingName.MatchString(name) {
			return fmt.Errorf("pgtxtest: invalid server setting name %q: %w", name, pgtx.ErrInvalidArgument)
		}
		if strings.ContainsRune(value, 0) {
			return fmt.Errorf("pgtxtest: server setting %s: value contains a NUL byte: %w", name, pgtx.ErrInvalidArgument)
		}
	}
	return nil
}

// SettingArgs turns settings into -c arguments, in a stable order.
func SettingArgs(settings map[string]string) []string {
	names := make([]string, 0, len(settings))
	for name := range settings {
		names = append(names, name)
	}
	sort.Strings(names)
	args := make([]string, 0, 2*len(names))
	for _, name := range names {
		args = append(args, "-c", name+"="+settings[name])
	}
	return args
}
