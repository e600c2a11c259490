package loadmgr

import (
	"bytes"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"
)

// Resources are a broker's CPU and memory usage as the reporter puts them in a Report.
type Resources struct {
	CPU    Usage // percent: 100 per core used / 100 per core available
	Memory Usage // MB resident / MB available
}

// ProcUsage samples the process's CPU and memory from /proc (Linux). CPU is the share of the
// cores the process may use (cgroup quota or CPUs) it used since the previous sample; memory
// its resident set against the memory limit (GOMEMLIMIT, the cgroup's memory.max, or the
// host's memory). Not safe for concurrent use: one goroutine (the Manager's) samples.
type ProcUsage struct {
	lastCPU  float64 // seconds of CPU used by the process at lastWall
	lastWall time.Time
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100

// Sample returns the usage since the previous call (CPU 0 on the first).
func (p *ProcUsage) Sample(now time.Time) Resources {
	var r Resources
	cores := cpuLimit()
	r.CPU.Limit = 100 * cores
	if cpu, ok := processCPUSeconds(); ok {
		if !p.lastWall.IsZero() {
			if dt := now.Sub(p.lastWall).Seconds(); dt > 0 {
				r.CPU.Usage = 100 * max(0, cpu-p.lastCPU) / dt
			}
		}
		p.lastCPU, p.lastWall = cpu, now
	}
	if rss, ok := residentBytes(); ok {
		r.Memory.Usage = float64(rss) / (1 << 20)
		r.Memory.Limit = float64(memoryLimit()) / (1 << 20)
	}
	return r
}

// processCPUSeconds reads utime+stime from /proc/self/stat.
func processCPUSeconds() (float64, bool) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return 0, false
	}
	// The command name (field 2) is in parentheses and may contain spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(b[i+1:]))
	// After the name: state is field 3, utime field 14, stime field 15.
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseFloat(f[11], 64)
	st, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return (ut + st) / clockTicks, true
}

// residentBytes reads the resident set from /proc/self/statm.
func residentBytes() (int64, bool) {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * int64(os.Getpagesize()), true
}

// cpuLimit is the cores the process may use: the cgroup v2 quota if set, else the CPUs it
// may run on.
func cpuLimit() float64 {
	n := float64(runtime.NumCPU())
	if b, err := os.ReadFile("/sys/fs/cgroup/cpu.max"); err == nil {
		f := strings.Fields(string(b))
		if len(f) == 2 && f[0] != "max" {
			q, err1 := strconv.ParseFloat(f[0], 64)
			per, err2 := strconv.ParseFloat(f[1], 64)
			if err1 == nil && err2 == nil && per > 0 && q > 0 {
				n = min(n, q/per)
			}
		}
	}
	return n
}

// memoryLimit is the smallest of GOMEMLIMIT, the cgroup v2 memory.max and the host's memory.
func memoryLimit() int64 {
	lim := int64(math.MaxInt64)
	if l := debug.SetMemoryLimit(-1); l > 0 {
		lim = l
	}
	if b, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && v > 0 {
			lim = min(lim, v)
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				f := strings.Fields(rest)
				if len(f) >= 1 {
					if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
						lim = min(lim, kb<<10)
					}
				}
			}
		}
	}
	if lim == math.MaxInt64 {
		return 0
	}
	return lim
}
