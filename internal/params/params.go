package params

import (
	"strconv"
	"strings"
	"time"
)

// Set sets the server parameter name, in milliseconds, among the startup
// parameters p, to be sent at connect. An explicit v wins; with v == 0 a
// value already in the connection string (as a parameter of its own, or as
// -c name=value in its options, the libpq way) wins over def; a negative v
// leaves p alone.
func Set(p map[string]string, name string, v, def time.Duration) {
	switch {
	case v < 0:
		return
	case v == 0:
		if _, ok := p[name]; ok || optionsSet(p["options"], name) {
			return
		}
		v = def
	}
	p[name] = strconv.FormatInt(Millis(v), 10)
}

// AskUTF8 asks the server for client_encoding UTF8 at connect, unless the
// connection string chose an encoding. pgx runs a simple-protocol query
// (pgtx's own, at connect and with BEGIN, and the caller's under
// QueryExecModeSimpleProtocol) only when the server reports UTF8, and a
// server reports its database's encoding unless the client asks: SQL_ASCII
// for a cluster made by initdb in the C locale without --encoding.
func AskUTF8(p map[string]string) {
	if _, ok := p["client_encoding"]; !ok && !optionsSet(p["options"], "client_encoding") {
		p["client_encoding"] = "UTF8"
	}
}

// Millis rounds d up to whole milliseconds, the unit of the server's
// timeout parameters: a timeout never becomes shorter, nor 0 (which the
// server reads as none).
func Millis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// Duration reads a duration setting as the server does (an integer is
// milliseconds; a unit may follow: us, ms, s, min, h, d), returning 0 for
// none, 0 itself, or text it cannot read.
func Duration(v string) time.Duration {
	v = strings.TrimSpace(v)
	i := 0
	for i < len(v) && (v[i] >= '0' && v[i] <= '9' || v[i] == '.') {
		i++
	}
	n, err := strconv.ParseFloat(v[:i], 64)
	if err != nil || n <= 0 {
		return 0
	}
	unit := map[string]time.Duration{"": time.Millisecond, "us": time.Microsecond, "ms": time.Millisecond,
		"s": time.Second, "min": time.Minute, "h": time.Hour, "d": 24 * time.Hour}[strings.TrimSpace(v[i:])]
	return time.Duration(n * float64(unit))
}

// optionsSet reports whether the server command-line options of a
// connection string ("-c name=value", "-cname=value" or "--name=value",
// with '-' allowed for '_' in the name, as the server reads them) set the
// parameter name. Backslash escapes a space, as in libpq.
func optionsSet(options, name string) bool {
	args := splitOptions(options)
	for i := 0; i < len(args); i++ {
		var setting string
		switch a := args[i]; {
		case a == "-c" && i+1 < len(args):
			i++
			setting = args[i]
		case strings.HasPrefix(a, "--"):
			setting = a[2:]
		case strings.HasPrefix(a, "-c"):
			setting = a[2:]
		default:
			continue
		}
		key, _, ok := strings.Cut(setting, "=")
		if ok && strings.EqualFold(strings.ReplaceAll(key, "-", "_"), name) {
			return true
		}
	}
	return false
}

// splitOptions splits options on unescaped white space.
func splitOptions(s string) []string {
	var args []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case c == ' ' || c == '\t' || c == '\n':
			if cur.Len() > 0 {
				args = append(args, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteByte(c)
		}
	}
	if cur.Len() > 0 {
		args = append(args, cur.String())
	}
	return args
}
