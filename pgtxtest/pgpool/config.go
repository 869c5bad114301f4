package pgpool

import (
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/pgtx-go/pgtx"
)

// pgpoolSettingName is a key pgpool.conf accepts: a letter or underscore, then
// letters, digits and underscores.
var pgpoolSettingName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// pgpoolConfig is a validated Config with the defaults filled in.
type pgpoolConfig struct {
	children int
	maxPool  int
	extra    map[string]string
}

// config validates o and fills in the defaults.
func (o Config) config() (pgpoolConfig, error) {
	c, err := o.check()
	if err != nil {
		return c, fmt.Errorf("%w: %w", err, pgtx.ErrInvalidArgument)
	}
	return c, nil
}

// check is config without the wrapping of its error.
func (o Config) check() (pgpoolConfig, error) {
	c := pgpoolConfig{children: o.NumInitChildren, maxPool: o.MaxPool, extra: o.Extra}
	switch {
	case c.children < 0:
		return c, fmt.Errorf("pgtxtest: pgpool.Config.NumInitChildren %d is negative", c.children)
	case c.children == 0:
		c.children = 8
	}
	switch {
	case c.maxPool < 0:
		return c, fmt.Errorf("pgtxtest: pgpool.Config.MaxPool %d is negative", c.maxPool)
	case c.maxPool == 0:
		c.maxPool = 4
	}
	for name, value := range o.Extra {
		if !pgpoolSettingName.MatchString(name) {
			return c, fmt.Errorf("pgtxtest: pgpool.Config.Extra: invalid setting name %q", name)
		}
		if strings.ContainsAny(value, "\x00\r\n") {
			return c, fmt.Errorf("pgtxtest: pgpool.Config.Extra: the value of %s contains a line break or NUL byte", name)
		}
	}
	return c, nil
}

// backend is one node of pgpool.conf: a server's TCP address.
type backend struct{ host, port string }

// confParams is what pgpool.conf says besides the Config: where pgpool lives and
// what it fronts.
type confParams struct {
	dir      string // the pgpool's directory: sockets, pid and status files
	port     int
	pcpPort  int
	user     string // the servers' user, who checks which node is the primary
	password string // its password, "" for none
	database string // the servers' default database
	backends []backend
}

// quoteConf quotes a string value of pgpool.conf. pgpool reads everything between
// the quotes as is, so the value must hold no quote (checked by the caller).
func quoteConf(s string) string { return "'" + s + "'" }

// confText renders pgpool.conf: the kit's settings, then the Extra ones, which
// pgpool applies in order and which so override the kit's.
func (c pgpoolConfig) confText(p confParams) string {
	var b strings.Builder
	line := func(name, value string) { fmt.Fprintf(&b, "%s = %s\n", name, value) }
	line("backend_clustering_mode", quoteConf("streaming_replication"))
	line("listen_addresses", quoteConf("127.0.0.1"))
	line("port", strconv.Itoa(p.port))
	line("unix_socket_directories", quoteConf(p.dir))
	line("pcp_listen_addresses", quoteConf("127.0.0.1"))
	line("pcp_port", strconv.Itoa(p.pcpPort))
	line("pcp_socket_dir", quoteConf(p.dir))
	for i, be := range p.backends {
		n := strconv.Itoa(i)
		line("backend_hostname"+n, quoteConf(be.host))
		line("backend_port"+n, be.port)
		line("backend_weight"+n, "1")
		line("backend_flag"+n, quoteConf("ALLOW_TO_FAILOVER"))
	}
	line("enable_pool_hba", "off")
	line("pool_passwd", quoteConf(""))
	line("num_init_children", strconv.Itoa(c.children))
	line("max_pool", strconv.Itoa(c.maxPool))
	line("connection_cache", "on")
	line("load_balance_mode", "on")
	line("disable_load_balance_on_write", quoteConf("transaction"))
	// pgpool finds the primary at start and after a failover as sr_check_user
	// even with the streaming check off; "TEXT" marks a password in clear,
	// so an empty one is not looked up in the (absent) pool_passwd.
	line("sr_check_period", "0")
	line("sr_check_user", quoteConf(p.user))
	line("sr_check_password", quoteConf("TEXT"+p.password))
	line("sr_check_database", quoteConf(p.database))
	line("health_check_period", "0")
	line("pid_file_name", quoteConf(filepath.Join(p.dir, "pgpool.pid")))
	line("logdir", quoteConf(p.dir))
	line("log_per_node_statement", "on")
	line("log_destination", quoteConf("stderr"))
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

// pcpConfText renders pcp.conf: user may run PCP commands with password, which
// the file holds as its MD5 in hex.
func pcpConfText(user, password string) string {
	sum := md5.Sum([]byte(password))
	return user + ":" + hex.EncodeToString(sum[:]) + "\n"
}

// pcpPassText renders the PCPPASSFILE that lets the pcp tools log in to any PCP
// port of 127.0.0.1 as user without a prompt. Neither user (see serverParams) nor
// password (hex) holds the colon or backslash the file would need escaped.
func pcpPassText(user, password string) string {
	return "127.0.0.1:*:" + user + ":" + password + "\n"
}
