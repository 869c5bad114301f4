package pgpool

import (
	"bufio"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pgtx-go/pgtx/pgtxtest/internal/proc"
)

// removeIPC removes the System V shared memory and semaphores that pgpool
// processes pids made, which only their own exit removes, once no process is
// attached to the memory, waiting a few seconds for that; Linux only
// (/proc/sysvipc).
func removeIPC(pids []int) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		ids, attached := sharedMemoryOf(pids...)
		if !attached {
			for _, id := range ids {
				_ = exec.Command("ipcrm", "-m", id).Run()
			}
			break
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, id := range semaphoresOf(pids...) {
		_ = exec.Command("ipcrm", "-s", id).Run()
	}
}

// sharedMemoryOf returns the ids of the shared memory segments processes pids
// created, and whether any process is attached to one of them.
func sharedMemoryOf(pids ...int) (ids []string, attached bool) {
	f, err := os.Open("/proc/sysvipc/shm")
	if err != nil {
		return nil, false
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	if !lines.Scan() {
		return nil, false
	}
	header := strings.Fields(lines.Text())
	idCol, cpidCol, nattchCol := slices.Index(header, "shmid"), slices.Index(header, "cpid"), slices.Index(header, "nattch")
	if idCol < 0 || cpidCol < 0 || nattchCol < 0 {
		return nil, false
	}
	for lines.Scan() {
		row := strings.Fields(lines.Text())
		if len(row) != len(header) {
			continue
		}
		if cpid, err := strconv.Atoi(row[cpidCol]); err != nil || !slices.Contains(pids, cpid) {
			continue
		}
		ids = append(ids, row[idCol])
		attached = attached || row[nattchCol] != "0"
	}
	return ids, attached
}

// semaphoresOf returns the ids of the semaphore sets whose used semaphores were
// all last used by processes pids. ipcs tells who used a semaphore last; /proc
// does not.
func semaphoresOf(pids ...int) []string {
	table, err := os.ReadFile("/proc/sysvipc/sem")
	lines := strings.Split(string(table), "\n")
	if err != nil || len(lines) < 2 {
		return nil
	}
	idCol := slices.Index(strings.Fields(lines[0]), "semid")
	var ids []string
	for _, line := range lines[1:] {
		row := strings.Fields(line)
		if idCol < 0 || len(row) <= idCol {
			continue
		}
		cmd := exec.Command("ipcs", "-s", "-i", row[idCol])
		cmd.Env = proc.Env()
		out, err := cmd.Output()
		_, sems, found := strings.Cut(string(out), "semnum")
		if err != nil || !found {
			continue
		}
		ours, others := 0, 0
		for _, sem := range strings.Split(sems, "\n")[1:] {
			f := strings.Fields(sem)
			if len(f) == 0 || f[len(f)-1] == "0" {
				continue
			}
			if pid, err := strconv.Atoi(f[len(f)-1]); err == nil && slices.Contains(pids, pid) {
				ours++
			} else {
				others++
			}
		}
		if ours > 0 && others == 0 {
			ids = append(ids, row[idCol])
		}
	}
	return ids
}
