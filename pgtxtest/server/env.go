package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// envConnectTimeout bounds the first connection to an env server.
const envConnectTimeout = 15 * time.Second

// openEnv checks that the server named by an env DSN answers and returns it.
func openEnv(ctx context.Context, envVar, dsn string) (*Server, error) {
	u, err := envURL(dsn)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envVar, err)
	}
	cfg, err := pgconn.ParseConfig(u.String())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envVar, err)
	}
	ctx, cancel := context.WithTimeout(ctx, envConnectTimeout)
	defer cancel()
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: connect to %s: %w", envVar, u.Redacted(), err)
	}
	if err := conn.Close(ctx); err != nil {
		return nil, fmt.Errorf("%s: close the first connection: %w", envVar, err)
	}
	s := newServer(KindEnv, u)
	if strings.HasPrefix(cfg.Host, "/") {
		s.addr = ""
	} else {
		s.addr = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	}
	return s, nil
}

// envURL turns a DSN, a URL or libpq keyword=value pairs, into a URL.
func envURL(dsn string) (*url.URL, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return nil, fmt.Errorf("invalid URL DSN: %w", errors.Unwrap(err))
		}
		return u, nil
	}
	kv, err := parseKeywordValue(dsn)
	if err != nil {
		return nil, err
	}
	u := &url.URL{Scheme: "postgres"}
	q := url.Values{}
	hosts, ports := splitList(kv["host"]), splitList(kv["port"])
	socket := false
	for _, h := range hosts {
		socket = socket || strings.HasPrefix(h, "/")
	}
	if socket || len(ports) > 1 && len(ports) != len(hosts) {
		if kv["host"] != "" {
			q.Set("host", kv["host"])
		}
		if kv["port"] != "" {
			q.Set("port", kv["port"])
		}
	} else {
		addrs := make([]string, 0, len(hosts))
		for i, h := range hosts {
			port := ""
			switch {
			case len(ports) == len(hosts):
				port = ports[i]
			case len(ports) == 1:
				port = ports[0]
			}
			if port == "" {
				if strings.Contains(h, ":") {
					h = "[" + h + "]"
				}
				addrs = append(addrs, h)
			} else {
				addrs = append(addrs, net.JoinHostPort(h, port))
			}
		}
		if len(hosts) == 0 && len(ports) == 1 {
			q.Set("port", ports[0])
		}
		u.Host = strings.Join(addrs, ",")
	}
	switch user, pass, hasPass := kv["user"], kv["password"], kv["password"] != ""; {
	case hasPass:
		u.User = url.UserPassword(user, pass)
	case user != "":
		u.User = url.User(user)
	}
	if db := kv["dbname"]; db != "" {
		u.Path = "/" + db
	}
	for k, v := range kv {
		switch k {
		case "host", "port", "user", "password", "dbname":
		default:
			q.Set(k, v)
		}
	}
	u.RawQuery = q.Encode()
	return u, nil
}

func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// parseKeywordValue parses libpq's keyword=value connection strings: pairs separated
// by spaces, values optionally single-quoted, backslash escaping ' and \.
func parseKeywordValue(s string) (map[string]string, error) {
	kv := map[string]string{}
	for {
		s = strings.TrimLeft(s, " \t\n\r\f\v")
		if s == "" {
			return kv, nil
		}
		eq := strings.IndexByte(s, '=')
		if eq <= 0 {
			return nil, fmt.Errorf("invalid keyword=value DSN: missing \"=\" after %q", truncate(s, 20))
		}
		key := strings.TrimSpace(s[:eq])
		if key == "" || strings.ContainsAny(key, " \t\n\r\f\v'\\") {
			return nil, fmt.Errorf("invalid keyword=value DSN: bad keyword %q", truncate(key, 20))
		}
		s = strings.TrimLeft(s[eq+1:], " \t\n\r\f\v")
		var val strings.Builder
		quoted := strings.HasPrefix(s, "'")
		if quoted {
			s = s[1:]
		}
		closed := false
		i := 0
		for ; i < len(s); i++ {
			c := s[i]
			if c == '\\' && i+1 < len(s) {
				i++
				val.WriteByte(s[i])
				continue
			}
			if quoted && c == '\'' {
				closed = true
				i++
				break
			}
			if !quoted && strings.ContainsRune(" \t\n\r\f\v", rune(c)) {
				break
			}
			val.WriteByte(c)
		}
		if quoted && !closed {
			return nil, fmt.Errorf("invalid keyword=value DSN: unterminated quote in the value of %s", key)
		}
		kv[key] = val.String()
		s = s[i:]
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Open returns the server that dsn names, a postgres:// URL or libpq keyword=value
// pairs, once a connection to it succeeds: a server of kind [KindEnv], as if
// PGTX_TEST_DATABASE_URL named it, for example to make databases on it with
// pgtxtest.WithServer. Its Stop does nothing to the server.
func Open(ctx context.Context, dsn string) (*Server, error) {
	s, err := openEnv(ctx, "pgtxtest: server.Open", dsn)
	if err != nil {
		return nil, err
	}
	return s, nil
}
