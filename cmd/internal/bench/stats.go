package bench

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// Latency summarises end-to-end latencies.
type Latency struct {
	P50 time.Duration `json:"p50_ns"`
	P90 time.Duration `json:"p90_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
}

// summarize returns the percentiles of ds (nearest rank); ds is sorted in place.
func summarize(ds []time.Duration) Latency {
	if len(ds) == 0 {
		return Latency{}
	}
	slices.Sort(ds)
	return Latency{P50: percentile(ds, 50), P90: percentile(ds, 90), P99: percentile(ds, 99), Max: ds[len(ds)-1]}
}

// percentile is the nearest-rank percentile p of sorted ds.
func percentile(sorted []time.Duration, p float64) time.Duration {
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	rank = max(0, min(rank, len(sorted)-1))
	return sorted[rank]
}

// Memory is the process's memory at one point.
type Memory struct {
	// RSS is VmRSS as read, bytes.
	RSS uint64 `json:"rss_bytes"`
	// RSSAfterGC is VmRSS after runtime.GC and debug.FreeOSMemory, bytes.
	RSSAfterGC uint64 `json:"rss_after_gc_bytes,omitempty"`
	// PeakRSS is VmHWM, the high-water mark of RSS since the process
	// started, bytes.
	PeakRSS uint64 `json:"peak_rss_bytes"`
	// HeapInuse is the Go heap in use (runtime.MemStats), bytes.
	HeapInuse uint64 `json:"heap_inuse_bytes"`
	// Goroutines is runtime.NumGoroutine.
	Goroutines int `json:"goroutines"`
}

// readMemory reads the process's memory; gc also collects garbage and
// returns freed memory to the OS first and reports RSS on both sides of it.
func readMemory(gc bool) Memory {
	var m Memory
	m.RSS, m.PeakRSS = procStatus()
	if gc {
		runtime.GC()
		debug.FreeOSMemory()
		m.RSSAfterGC, _ = procStatus()
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	m.HeapInuse = ms.HeapInuse
	m.Goroutines = runtime.NumGoroutine()
	return m
}

// cpuTime is the user + system CPU time the process used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// diskWritten is what the process caused to be written to storage so far
// (write_bytes of /proc/self/io), in bytes; 0 where unavailable.
func diskWritten() uint64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range bytes.Split(b, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("write_bytes:")); ok {
			n, _ := strconv.ParseUint(string(bytes.TrimSpace(v)), 10, 64)
			return n
		}
	}
	return 0
}

// procStatus returns VmRSS and VmHWM from /proc/self/status, in bytes; zeros
// where the file does not exist (not Linux).
func procStatus() (rss, hwm uint64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.HasPrefix(line, []byte("VmRSS:")):
			rss = kib(line[len("VmRSS:"):])
		case bytes.HasPrefix(line, []byte("VmHWM:")):
			hwm = kib(line[len("VmHWM:"):])
		}
	}
	return rss, hwm
}

// kib parses "   1234 kB" into bytes.
func kib(field []byte) uint64 {
	f := bytes.Fields(field)
	if len(f) == 0 {
		return 0
	}
	n, err := strconv.ParseUint(string(f[0]), 10, 64)
	if err != nil {
		return 0
	}
	return n << 10
}
