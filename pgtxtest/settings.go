package pgtxtest

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

var settingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

func validateSettings(settings map[string]string) error {
	for name, value := range settings {
		if !settingName.MatchString(name) {
			return fmt.Errorf("pgtxtest: invalid server setting name %q", name)
		}
		if strings.ContainsRune(value, 0) {
			return fmt.Errorf("pgtxtest: server setting %s: value contains a NUL byte", name)
		}
	}
	return nil
}

// settingArgs turns settings into -c arguments, in a stable order.
func settingArgs(settings map[string]string) []string {
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
