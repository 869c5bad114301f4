package pgpool

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgtx-go/pgtx"
	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

// What pgpool says of a PCP request for a node that is already as asked (the
// pcp tool's error), and the lines it logs when it drops a request the pcp tool
// reported done.
var (
	pcpAlready  = map[string]string{"pcp_promote_node": "specified node is already primary node"}
	pcpRefusals = map[string]string{
		"pcp_promote_node": "invalid promote backend request",
		"pcp_attach_node":  "invalid failback request",
	}
)

// pcp runs tool (pcp_promote_node or pcp_attach_node) for node id, then waits
// until SHOW POOL_NODES shows done of the node, bounded by ctx and
// pgpoolPCPTimeout. The pcp tools exit 0 for requests pgpool refuses, and pgpool
// applies the ones it takes after they exit: the node's state, not the tool's
// exit, says the command took effect. A node already as asked is done.
func (p *Pgpool) pcp(ctx context.Context, tool string, id int, done func(Node) bool) error {
	if id < 0 || id >= p.nodes {
		return fmt.Errorf("pgtxtest: pgpool %s: node %d: want 0 to %d: %w", tool, id, p.nodes-1, pgtx.ErrInvalidArgument)
	}
	ctx, cancel := context.WithTimeout(ctx, pgpoolPCPTimeout)
	defer cancel()
	logStart := proc.LogSize(p.LogPath())
	err := p.runPCP(ctx, tool, id)
	if err != nil && (pcpAlready[tool] == "" || !strings.Contains(err.Error(), pcpAlready[tool])) {
		return fmt.Errorf("pgtxtest: pgpool %s -n %d: %w", tool, id, err)
	}
	if refusal := refusedLine(proc.Tail(p.LogPath(), logStart, 1<<16), pcpRefusals[tool]); refusal != "" {
		return fmt.Errorf("pgtxtest: pgpool %s -n %d: pgpool refused: %s", tool, id, refusal)
	}
	var last error
	for {
		nodes, err := p.Nodes(ctx)
		i := slices.IndexFunc(nodes, func(n Node) bool { return n.ID == id })
		switch {
		case err != nil:
			last = err
		case i < 0:
			last = fmt.Errorf("SHOW POOL_NODES lists no node %d", id)
		case done(nodes[i]):
			return nil
		default:
			last = fmt.Errorf("node %d is %s, %s", id, nodes[i].Status, nodes[i].Role)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtxtest: pgpool %s -n %d: not done: %w (last: %w)\npgpool log:\n%s",
				tool, id, ctx.Err(), last, proc.Tail(p.LogPath(), logStart, 4096))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runPCP runs tool once pgpool's PCP process takes it: pgpool restarts that
// process after every failover and failback, and refuses connections meanwhile.
func (p *Pgpool) runPCP(ctx context.Context, tool string, id int) error {
	path, err := p.pcpTool(tool)
	if err != nil {
		return err
	}
	for {
		cmd := exec.CommandContext(ctx, path, "-h", "127.0.0.1", "-p", strconv.Itoa(p.pcpPort),
			"-U", p.user, "-w", "-n", strconv.Itoa(id))
		cmd.Env = append(proc.Env(), "PCPPASSFILE="+p.pcpPassPath())
		cmd.WaitDelay = proc.KillGrace
		out, err := cmd.CombinedOutput()
		text := strings.TrimSpace(string(out))
		switch {
		case err == nil && strings.Contains(text, "Command Successful"):
			return nil
		case !strings.Contains(text, "connection to host"):
			return errors.Join(err, errors.New(text))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %s)", ctx.Err(), text)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// pcpTool returns the path of a pcp tool: beside pgpool, else in PATH.
func (p *Pgpool) pcpTool(name string) (string, error) {
	if path, err := exec.LookPath(filepath.Join(filepath.Dir(p.bin), name)); err == nil {
		return path, nil
	}
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("%s is neither beside %s nor in PATH (it comes with Pgpool-II)", name, p.bin)
	}
	return path, nil
}

// refusedLine returns the first line of log that holds refusal, "" if none does.
func refusedLine(log, refusal string) string {
	for line := range strings.SplitSeq(log, "\n") {
		if strings.Contains(line, refusal) {
			return strings.TrimSpace(line)
		}
	}
	return ""
}
