package rig

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ClockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat CPU times
// (100 on every mainstream Linux).
const ClockTicks = 100

// ProcSample is one reading of a process from /proc.
type ProcSample struct {
	At         time.Time
	UTime      uint64 // user CPU, clock ticks
	STime      uint64 // system CPU, clock ticks
	CUTime     uint64 // user CPU of exited children it waited for, clock ticks
	CSTime     uint64 // system CPU of exited children it waited for, clock ticks
	PPID       int    // parent process id
	VmRSS      int64  // resident set now, bytes
	VmHWM      int64  // peak resident set, bytes
	RssFile    int64  // resident pages mapped from files (the binary's code and data), bytes
	RssAnon    int64  // resident anonymous memory (heaps, stacks), bytes
	NumThreads int
}

// CPUTicks is user plus system CPU, in clock ticks.
func (s ProcSample) CPUTicks() uint64 { return s.UTime + s.STime }

// ReadProc reads /proc/PID/stat and /proc/PID/status.
func ReadProc(pid int) (ProcSample, error) {
	s := ProcSample{At: time.Now()}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// count fields after the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return s, fmt.Errorf("rig: unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(string(stat[i+1:]))
	// f[0] is field 3 (state); ppid is field 4, utime 14, stime 15, cutime
	// 16, cstime 17.
	if len(f) < 15 {
		return s, fmt.Errorf("rig: short /proc/%d/stat", pid)
	}
	if s.PPID, err = strconv.Atoi(f[1]); err != nil {
		return s, err
	}
	var cpu [4]uint64
	for i := range cpu {
		if cpu[i], err = strconv.ParseUint(f[11+i], 10, 64); err != nil {
			return s, err
		}
	}
	s.UTime, s.STime, s.CUTime, s.CSTime = cpu[0], cpu[1], cpu[2], cpu[3]
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "VmRSS":
			s.VmRSS = kB(v)
		case "VmHWM":
			s.VmHWM = kB(v)
		case "RssFile":
			s.RssFile = kB(v)
		case "RssAnon":
			s.RssAnon = kB(v)
		case "Threads":
			s.NumThreads, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return s, nil
}

func kB(v string) int64 {
	n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
	return n * 1024
}

// CPUShare is the CPU the process used between two samples, in cores
// (1.0 = one core busy the whole interval).
func CPUShare(from, to ProcSample) float64 {
	dt := to.At.Sub(from.At).Seconds()
	if dt <= 0 {
		return 0
	}
	return float64(to.CPUTicks()-from.CPUTicks()) / ClockTicks / dt
}

// Sampler reads a process every interval in the background and keeps the
// first and last samples and the peak RSS, so a process that exits or is
// killed mid-run still reports what it used until then.
type Sampler struct {
	pid  int
	stop chan struct{}
	done chan struct{}
	once sync.Once

	mu          sync.Mutex
	first, last ProcSample
	n           int
	peak        int64
}

// StartSampler samples pid every interval until Stop.
func StartSampler(pid int, interval time.Duration) *Sampler {
	s := &Sampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	s.sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *Sampler) sample() {
	p, err := ReadProc(s.pid)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		s.first = p
	}
	s.last = p
	s.n++
	s.peak = max(s.peak, p.VmHWM, p.VmRSS)
}

// SamplerResult is what a Sampler saw.
type SamplerResult struct {
	First, Last ProcSample
	Samples     int
	PeakRSS     int64   // bytes: the largest VmHWM (or VmRSS) read
	CPU         float64 // cores, averaged between the first and last sample
}

// Stop takes a last sample (if the process still runs), ends the sampling
// and returns the result. Later calls return the same result.
func (s *Sampler) Stop() SamplerResult {
	s.once.Do(func() {
		close(s.stop)
		<-s.done
		s.sample()
	})
	return s.Result()
}

// Result is what was sampled so far.
func (s *Sampler) Result() SamplerResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	return SamplerResult{First: s.first, Last: s.last, Samples: s.n, PeakRSS: s.peak, CPU: CPUShare(s.first, s.last)}
}

// Descendants lists the running processes whose ancestry leads to pid (pid
// itself excluded), from a scan of /proc.
func Descendants(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited meanwhile
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out, nil
}

// TreeCPUTicks is the CPU, in clock ticks, used so far by pid, its running
// descendants and the exited children it waited for: the whole cost of a
// server that forks a process per connection, such as Postgres. A
// descendant that exits unwaited-for between two readings loses its ticks.
func TreeCPUTicks(pid int) (uint64, error) {
	root, err := ReadProc(pid)
	if err != nil {
		return 0, err
	}
	total := root.CPUTicks() + root.CUTime + root.CSTime
	kids, err := Descendants(pid)
	if err != nil {
		return 0, err
	}
	for _, k := range kids {
		if s, err := ReadProc(k); err == nil {
			total += s.CPUTicks()
		}
	}
	return total, nil
}

// OpenFDs counts the process's open file descriptors (/proc/PID/fd).
func OpenFDs(pid int) (int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	return len(ents), nil
}
