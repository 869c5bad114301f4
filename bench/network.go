package main

import (
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgtx-go/pgtx/pgtxtest/faultproxy"
)

// parseLatencies parses "0,250us,500us": the one-way latencies the
// overhead scenario runs its cells at, each distinct and not negative, in
// the order given.
func parseLatencies(s string) ([]time.Duration, error) {
	var ds []time.Duration
	seen := map[time.Duration]bool{}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "0" {
			part = "0s"
		}
		d, err := time.ParseDuration(part)
		switch {
		case err != nil:
			return nil, fmt.Errorf("-latency: %q is not a duration such as 250us", part)
		case d < 0:
			return nil, fmt.Errorf("-latency: %v is negative", d)
		case seen[d]:
			return nil, fmt.Errorf("-latency: %v is given twice", d)
		}
		seen[d] = true
		ds = append(ds, d)
	}
	return ds, nil
}

// atLatency returns e with its dsn through the kit's fault proxy, which
// holds every client→server message d (each round trip is at least d
// longer), and the proxy's close; at 0, e itself.
func atLatency(e *env, d time.Duration) (*env, func(), error) {
	if d == 0 {
		return e, func() {}, nil
	}
	cfg, err := pgconn.ParseConfig(e.dsn)
	if err != nil {
		return nil, nil, err
	}
	if strings.HasPrefix(cfg.Host, "/") {
		return nil, nil, fmt.Errorf("-latency needs a server on TCP, not the socket %s", cfg.Host)
	}
	proxy, err := faultproxy.Start(net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)))
	if err != nil {
		return nil, nil, err
	}
	proxy.SetLatency(d)
	through, err := proxy.DSN(e.dsn)
	if err != nil {
		proxy.Close()
		return nil, nil, err
	}
	at := *e
	at.dsn = through
	return &at, func() { proxy.Close() }, nil
}

// latencyName is how a table names a latency: "loopback" at 0.
func latencyName(d time.Duration) string {
	if d == 0 {
		return "loopback"
	}
	return d.String() + " one-way (fault proxy)"
}
