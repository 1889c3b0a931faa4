package rig

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// PGReads is what a Postgres server has read into its buffer cache and
// written out of it, read from its statistics views: the difference of two
// readings is what a stretch of work cost.
type PGReads struct {
	// Blocks maps a table or index of the database to the blocks (8 KiB)
	// read into the buffer cache since the statistics were reset: from the
	// kernel's page cache or from the disk, which Postgres cannot tell
	// apart. A table's TOAST is "NAME (toast)".
	Blocks map[string]int64
	// BackendWrites are buffers written out by the backends themselves to
	// make room for a page (pg_stat_bgwriter.buffers_backend): neither the
	// checkpointer nor the background writer had cleaned one in time.
	BackendWrites int64
}

// ReadPGReads reads PGReads of the Postgres database at url.
func ReadPGReads(ctx context.Context, url string) (PGReads, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return PGReads{}, err
	}
	defer conn.Close(ctx)
	r := PGReads{Blocks: map[string]int64{}}
	rows, err := conn.Query(ctx, `
		SELECT relname, coalesce(heap_blks_read, 0) FROM pg_statio_user_tables
		UNION ALL
		SELECT relname || ' (toast)', coalesce(toast_blks_read, 0) + coalesce(tidx_blks_read, 0) FROM pg_statio_user_tables
		UNION ALL
		SELECT indexrelname, coalesce(idx_blks_read, 0) FROM pg_statio_user_indexes`)
	if err != nil {
		return PGReads{}, err
	}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return PGReads{}, err
		}
		r.Blocks[name] += n
	}
	if err := rows.Err(); err != nil {
		return PGReads{}, err
	}
	// pg_stat_bgwriter lost buffers_backend in Postgres 17 (pg_stat_io
	// has it); where it is missing the figure is -1.
	if err := conn.QueryRow(ctx, `SELECT buffers_backend FROM pg_stat_bgwriter`).Scan(&r.BackendWrites); err != nil {
		r.BackendWrites = -1
	}
	return r, nil
}

// RelReads is one relation's blocks read over a stretch of work.
type RelReads struct {
	Name   string
	Blocks int64
}

// Since is what was read between from and r: the relations that read
// anything, most first, and the backends' writes (-1 if unknown).
func (r PGReads) Since(from PGReads) (rels []RelReads, backendWrites int64) {
	for name, n := range r.Blocks {
		if d := n - from.Blocks[name]; d > 0 {
			rels = append(rels, RelReads{name, d})
		}
	}
	sort.Slice(rels, func(i, j int) bool {
		if rels[i].Blocks != rels[j].Blocks {
			return rels[i].Blocks > rels[j].Blocks
		}
		return rels[i].Name < rels[j].Name
	})
	backendWrites = -1
	if r.BackendWrites >= 0 && from.BackendWrites >= 0 {
		backendWrites = r.BackendWrites - from.BackendWrites
	}
	return rels, backendWrites
}

// MachineCPU is the machine's CPU time so far, in clock ticks, from the
// first line of /proc/stat.
type MachineCPU struct {
	Total, Idle, IOWait uint64
}

// ReadMachineCPU reads /proc/stat.
func ReadMachineCPU() (MachineCPU, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return MachineCPU{}, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		return MachineCPU{}, fmt.Errorf("rig: empty /proc/stat")
	}
	return parseMachineCPU(sc.Text())
}

// parseMachineCPU parses /proc/stat's "cpu" line: user nice system idle
// iowait irq softirq steal (guest times are already in user and nice).
func parseMachineCPU(line string) (MachineCPU, error) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return MachineCPU{}, fmt.Errorf("rig: unexpected /proc/stat line %q", line)
	}
	var v [8]uint64
	var m MachineCPU
	for i := range v {
		n, err := strconv.ParseUint(f[1+i], 10, 64)
		if err != nil {
			return MachineCPU{}, fmt.Errorf("rig: /proc/stat: %w", err)
		}
		v[i] = n
		m.Total += n
	}
	m.Idle, m.IOWait = v[3], v[4]
	return m, nil
}

// Shares is the fraction of the machine's CPU time between from and m that
// was idle and that was idle waiting on I/O (-1, -1 if none passed).
func (m MachineCPU) Shares(from MachineCPU) (idle, iowait float64) {
	if m.Total <= from.Total {
		return -1, -1
	}
	t := float64(m.Total - from.Total)
	return float64(m.Idle-from.Idle) / t, float64(m.IOWait-from.IOWait) / t
}

// TreeReadBytes is what pid and its running descendants have read from
// storage so far (/proc/PID/io read_bytes: reads the page cache served are
// not counted). Reading another user's process needs the rights to.
func TreeReadBytes(pid int) (int64, error) {
	kids, err := Descendants(pid)
	if err != nil {
		return 0, err
	}
	var total int64
	for i, p := range append([]int{pid}, kids...) {
		n, err := readIOBytes(p)
		if err != nil {
			if i == 0 {
				return 0, err
			}
			continue // exited meanwhile
		}
		total += n
	}
	return total, nil
}

func readIOBytes(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "read_bytes:"); ok {
			return strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		}
	}
	return 0, fmt.Errorf("rig: no read_bytes in /proc/%d/io", pid)
}
