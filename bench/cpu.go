package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// clockTicks is the unit of the CPU times in /proc/<pid>/stat (USER_HZ), 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// errNoStat is a /proc/<pid>/stat that cannot be read or parsed.
var errNoStat = errors.New("no readable /proc/<pid>/stat")

// procStat is the part of /proc/<pid>/stat the CPU meter reads.
type procStat struct {
	ppid int
	// cpu is utime+stime+cutime+cstime in seconds: the process's own CPU (all its
	// threads) and that of its children it has reaped.
	cpu float64
}

// readStat parses /proc/<pid>/stat.
func readStat(pid int) (procStat, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, fmt.Errorf("%w: %d: %v", errNoStat, pid, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces: the fields
	// that follow start after the last ')'. They are field 3 (state) onwards.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("%w: %d", errNoStat, pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("%w: %d: %d fields", errNoStat, pid, len(f))
	}
	ppid, err := strconv.Atoi(f[1]) // field 4
	if err != nil {
		return procStat{}, fmt.Errorf("%w: %d: ppid: %v", errNoStat, pid, err)
	}
	var ticks float64
	for _, s := range f[11:15] { // fields 14-17: utime, stime, cutime, cstime
		v, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return procStat{}, fmt.Errorf("%w: %d: %v", errNoStat, pid, err)
		}
		ticks += v
	}
	return procStat{ppid: ppid, cpu: ticks / clockTicks}, nil
}

// treeCPU is the CPU seconds of pid and of its live children (a Postgres cluster: the
// postmaster and its backends and workers). A child that exits between two readings is
// still counted: the postmaster's cutime and cstime take its time when it is reaped.
func treeCPU(pid int) (float64, error) {
	root, err := readStat(pid)
	if err != nil {
		return 0, err
	}
	sum := root.cpu
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, d := range dirs {
		child, err := strconv.Atoi(d.Name())
		if err != nil || child == pid {
			continue
		}
		st, err := readStat(child)
		if err != nil || st.ppid != pid {
			continue // gone meanwhile, or not a child
		}
		sum += st.cpu
	}
	return sum, nil
}

// cpuMeter reads the CPU seconds of the processes a workload runs on, by name.
type cpuMeter struct {
	// pids are single processes (a service, the NATS server, the bench itself).
	pids map[string]int
	// trees are processes counted with their children (Postgres).
	trees map[string]int
	// scope says what the names cover, for the JSON line.
	scope string
	// missing names the processes of the mesh the meter cannot read, and why.
	missing map[string]string
}

// before is each process's CPU seconds at the start of a measured phase, after for its
// end; a process that cannot be read is left out. A tree's reading walks /proc, a few
// milliseconds of the bench process's own CPU: before walks the trees first and after
// last, so the bench process's reading (the in-process mesh's figure) leaves the walks out.
func (m cpuMeter) before() map[string]float64 {
	out := map[string]float64{}
	m.readTrees(out)
	m.readPids(out)
	return out
}

// after: see before.
func (m cpuMeter) after() map[string]float64 {
	out := map[string]float64{}
	m.readPids(out)
	m.readTrees(out)
	return out
}

// readPids reads each process's CPU seconds; the bench's own from getrusage, exact to the
// microsecond, where /proc/<pid>/stat counts in clock ticks (10 ms, a fifth of a
// 1,000-wide fan-out). getrusage counts the bench's own threads and not the children it
// reaped, whose time the meter counts under their own names (Postgres) or not at all.
func (m cpuMeter) readPids(out map[string]float64) {
	self := os.Getpid()
	for name, pid := range m.pids {
		if pid == self {
			if d := selfCPU(); d > 0 {
				out[name] = d.Seconds()
				continue
			}
		}
		if st, err := readStat(pid); err == nil {
			out[name] = st.cpu
		}
	}
}

func (m cpuMeter) readTrees(out map[string]float64) {
	for name, pid := range m.trees {
		if v, err := treeCPU(pid); err == nil {
			out[name] = v
		}
	}
}

// perKSteps is the CPU seconds each process spent between two readings, per 1,000 steps.
func perKSteps(before, after map[string]float64, steps int) map[string]float64 {
	out := map[string]float64{}
	if steps <= 0 {
		return out
	}
	for name, a := range after {
		b, ok := before[name]
		if !ok {
			continue
		}
		out[name] = round3((a - b) * 1000 / float64(steps))
	}
	return out
}

// postmasterPID is the pid in a Postgres data directory's postmaster.pid (its first line).
func postmasterPID(dataDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(line))
}

// externalPostgres is why an external Postgres has no CPU figure.
const externalPostgres = "an external Postgres (NOETL_PG_URL): its processes are not the bench's to read"

// inprocCPUMeter meters an in-process mesh: the bench process (every service, the
// embedded NATS server and the bench's own client) and, when the mesh runs its private
// Postgres in pgDir, the Postgres cluster.
func inprocCPUMeter(pgDir string) cpuMeter {
	m := cpuMeter{pids: map[string]int{"mesh_in_process": os.Getpid()}, trees: map[string]int{},
		scope: "the mesh runs in the bench process: mesh_in_process is that process's CPU (getrusage, to the microsecond: orchestrator, materializer, worker, statebuilder, resultstore, gateway, embedded NATS and the bench's own client together), postgres the private cluster's postmaster and its children; run with --procs for one figure per service"}
	m.missing = map[string]string{}
	switch pid, err := postmasterPID(filepath.Join(pgDir, "data")); {
	case pgDir == "":
		m.missing["postgres"] = externalPostgres
	case err != nil:
		m.missing["postgres"] = "no postmaster.pid in the private cluster's directory: " + err.Error()
	default:
		m.trees["postgres"] = pid
	}
	return m
}

// procsCPUMeter meters a process mesh: each service's process, the NATS server's, the
// bench process (its client alone) and the private Postgres cluster if it runs one.
func procsCPUMeter(p *procMesh) cpuMeter {
	m := cpuMeter{pids: map[string]int{"bench": os.Getpid()}, trees: map[string]int{},
		scope: "each service runs as its own OS process (built from ./services), NATS too (bench/chaos/natsnode); each figure is the process's utime+stime+cutime+cstime (/proc/<pid>/stat) over the measured phase per 1,000 steps, postgres summed over the private cluster's postmaster and its children, bench the bench's own client (getrusage, to the microsecond)"}
	for _, sp := range p.procs {
		m.pids[sp.name] = sp.cmd.Process.Pid
	}
	m.missing = map[string]string{}
	if p.natsProc != nil {
		m.pids["nats"] = p.natsProc.cmd.Process.Pid
	} else {
		m.missing["nats"] = "embedded in the bench process: counted in bench"
	}
	if p.pg != nil {
		m.trees["postgres"] = p.pg.PID()
	} else {
		m.missing["postgres"] = externalPostgres
	}
	return m
}
