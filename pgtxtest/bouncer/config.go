package bouncer

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

// bouncerConfig is a validated Config with the defaults filled in.
type bouncerConfig struct {
	mode             PoolMode
	poolSize         int
	maxClientConn    int
	queryWaitSeconds int64
	loginRetryMillis int64
	ignore           []string
	extra            map[string]string
}

// config validates o and fills in the defaults.
func (o Config) config() (bouncerConfig, error) {
	c, err := o.check()
	if err != nil {
		return c, fmt.Errorf("%w: %w", err, pgtx.ErrInvalidArgument)
	}
	return c, nil
}

// check is config without the wrapping of its error.
func (o Config) check() (bouncerConfig, error) {
	c := bouncerConfig{
		mode:             o.Mode,
		poolSize:         o.DefaultPoolSize,
		maxClientConn:    o.MaxClientConn,
		queryWaitSeconds: 5,
		loginRetryMillis: 1000,
		ignore:           []string{"extra_float_digits"},
		extra:            o.Extra,
	}
	switch c.mode {
	case "":
		c.mode = PoolTransaction
	case PoolTransaction, PoolSession:
	default:
		return c, fmt.Errorf("pgtxtest: bouncer.Config.Mode %q: want %q or %q", o.Mode, PoolTransaction, PoolSession)
	}
	switch {
	case c.poolSize < 0:
		return c, fmt.Errorf("pgtxtest: bouncer.Config.DefaultPoolSize %d is negative", c.poolSize)
	case c.poolSize == 0:
		c.poolSize = 4
	}
	switch {
	case c.maxClientConn < 0:
		return c, fmt.Errorf("pgtxtest: bouncer.Config.MaxClientConn %d is negative", c.maxClientConn)
	case c.maxClientConn == 0:
		c.maxClientConn = 100
	}
	switch {
	case o.QueryWaitTimeout < 0:
		return c, fmt.Errorf("pgtxtest: bouncer.Config.QueryWaitTimeout %v is negative", o.QueryWaitTimeout)
	case o.QueryWaitTimeout > 0:
		c.queryWaitSeconds = ceilDiv(o.QueryWaitTimeout, time.Second)
	}
	switch {
	case o.ServerLoginRetry < 0:
		return c, fmt.Errorf("pgtxtest: bouncer.Config.ServerLoginRetry %v is negative", o.ServerLoginRetry)
	case o.ServerLoginRetry > 0:
		c.loginRetryMillis = ceilDiv(o.ServerLoginRetry, time.Millisecond)
	}
	for _, p := range o.IgnoreStartupParameters {
		if !proc.SettingName.MatchString(p) {
			return c, fmt.Errorf("pgtxtest: bouncer.Config.IgnoreStartupParameters: invalid parameter name %q", p)
		}
		if !containsFold(c.ignore, p) {
			c.ignore = append(c.ignore, p)
		}
	}
	for name, value := range o.Extra {
		if !proc.SettingName.MatchString(name) {
			return c, fmt.Errorf("pgtxtest: bouncer.Config.Extra: invalid setting name %q", name)
		}
		if strings.ContainsAny(value, "\x00\r\n") {
			return c, fmt.Errorf("pgtxtest: bouncer.Config.Extra: the value of %s contains a line break or NUL byte", name)
		}
	}
	return c, nil
}

// ceilDiv returns d/unit rounded up.
func ceilDiv(d, unit time.Duration) int64 {
	n := int64(d / unit)
	if d%unit != 0 && n < math.MaxInt64 {
		n++
	}
	return n
}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// quoteUserlist quotes a field of the auth file: in double quotes, with double
// quotes doubled.
func quoteUserlist(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// bouncerAuthQuery finds any role of the server, with no password: the bouncer's
// clients use trust, and so does the server for the roles a test creates.
const bouncerAuthQuery = "SELECT rolname::text, NULL::text FROM pg_catalog.pg_roles WHERE rolname = $1"

// iniText renders pgbouncer.ini for a bouncer in dir on port, in front of the
// server at upHost:upPort, whose user is user.
func (c bouncerConfig) iniText(dir string, port int, user, upHost, upPort string) string {
	var b strings.Builder
	line := func(name, value string) { fmt.Fprintf(&b, "%s = %s\n", name, value) }
	b.WriteString("[databases]\n")
	line("*", "host="+upHost+" port="+upPort)
	b.WriteString("\n[pgbouncer]\n")
	line("listen_addr", "127.0.0.1")
	line("listen_port", strconv.Itoa(port))
	line("unix_socket_dir", "")
	line("pidfile", filepath.Join(dir, "pgbouncer.pid"))
	line("logfile", filepath.Join(dir, "pgbouncer.log"))
	line("auth_type", "trust")
	line("auth_file", filepath.Join(dir, "userlist.txt"))
	line("auth_user", user)
	line("auth_query", bouncerAuthQuery)
	line("admin_users", user)
	line("stats_users", user)
	line("pool_mode", string(c.mode))
	line("default_pool_size", strconv.Itoa(c.poolSize))
	line("max_client_conn", strconv.Itoa(c.maxClientConn))
	line("query_wait_timeout", strconv.FormatInt(c.queryWaitSeconds, 10))
	line("server_login_retry", strconv.FormatFloat(float64(c.loginRetryMillis)/1000, 'f', -1, 64))
	line("server_check_delay", "0")
	line("ignore_startup_parameters", strings.Join(c.ignore, ","))
	if c.mode == PoolSession {
		line("server_reset_query", "DISCARD ALL")
	} else {
		line("server_reset_query", "")
	}
	line("server_tls_sslmode", "disable")
	line("log_connections", "1")
	line("log_disconnections", "1")
	names := make([]string, 0, len(c.extra))
	for name := range c.extra {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		line(name, c.extra[name])
	}
	return b.String()
}
