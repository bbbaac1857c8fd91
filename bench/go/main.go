// Command bench measures dlock-go against redsync and redislock on one server, in one
// run: G goroutines take one lock over and over (hold 0 and 1 ms), for a few seconds
// each. Figures: grants/s, p50/p99 wait, commands per grant (INFO commandstats delta /
// grants), Jain fairness over the goroutines' grant counts. See bench/README.md.
//
//	DLOCK_MODULE=... REDIS_SERVER=redis-server go run . -duration 3s -out ../results-go.md
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	dlock "github.com/dlock/dlock/clients/go"
)

type locker interface {
	// lock waits until granted; returns an unlock function.
	lock(ctx context.Context) (func(), error)
}

type dlockL struct{ m *dlock.Mutex }

func (d dlockL) lock(ctx context.Context) (func(), error) {
	h, err := d.m.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return func() {
		if u, err := h.Unlock(ctx); err != nil || u != dlock.Released {
			fmt.Fprintln(os.Stderr, "dlock unlock:", u, err)
		}
	}, nil
}

// rawL sends the commands with go-redis alone: the floor for any Go client on them.
type rawL struct {
	rdb *redis.Client
	seq *int64
	mu  *sync.Mutex
}

func (r rawL) lock(ctx context.Context) (func(), error) {
	r.mu.Lock()
	*r.seq++
	owner := "raw:" + strconv.FormatInt(*r.seq, 10)
	r.mu.Unlock()
	for {
		_, err := r.rdb.Do(ctx, "DLOCK.ACQUIRE", "bench:raw", owner, "PX", 30000, "WAIT", 2000).Int64()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			return nil, err
		}
		return func() { _ = r.rdb.Do(ctx, "DLOCK.RELEASE", "bench:raw", owner).Err() }, nil
	}
}

type redsyncL struct {
	rs   *redsync.Redsync
	opts []redsync.Option
}

func (r redsyncL) lock(ctx context.Context) (func(), error) {
	m := r.rs.NewMutex("bench:redsync", r.opts...)
	if err := m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func() { _, _ = m.UnlockContext(ctx) }, nil
}

type redislockL struct {
	c     *redislock.Client
	retry func() redislock.RetryStrategy
}

func (r redislockL) lock(ctx context.Context) (func(), error) {
	l, err := r.c.Obtain(ctx, "bench:redislock", 8*time.Second, &redislock.Options{RetryStrategy: r.retry()})
	if err != nil {
		return nil, err
	}
	return func() { _ = l.Release(ctx) }, nil
}

func (r result) rate() float64 {
	if r.secs == 0 {
		return 0
	}
	return float64(r.grants) / r.secs
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

type result struct {
	name          string
	hold          time.Duration
	grants        int
	errors        int
	secs          float64
	p50, p99, max time.Duration
	cmdsPerGrant  float64
	jain          float64
}

func commandCalls(ctx context.Context, rdb *redis.Client) int64 {
	s, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		fmt.Fprintln(os.Stderr, "INFO commandstats:", err)
		os.Exit(1)
	}
	var total int64
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		switch strings.TrimPrefix(name, "cmdstat_") {
		case "info", "hello", "client|setinfo", "client", "ping", "command", "command|docs", "command|info", "select":
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, _ := strconv.ParseInt(calls, 10, 64)
		total += n
	}
	return total
}

func run(ctx context.Context, rdb *redis.Client, name string, l locker, g int, hold, dur time.Duration) result {
	// Warm the pool so connection setup is not measured.
	var wg sync.WaitGroup
	before := commandCalls(ctx, rdb)
	counts := make([]int, g)
	waits := make([][]time.Duration, g)
	errs := make([]int, g)
	stop := time.Now().Add(dur)
	start := time.Now()
	for i := 0; i < g; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for time.Now().Before(stop) {
				t0 := time.Now()
				unlock, err := l.lock(ctx)
				if err != nil {
					errs[i]++
					continue
				}
				waits[i] = append(waits[i], time.Since(t0))
				counts[i]++
				if hold > 0 {
					time.Sleep(hold)
				}
				unlock()
			}
		}(i)
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	after := commandCalls(ctx, rdb)
	var all []time.Duration
	total, ne := 0, 0
	var sum, sumsq float64
	for i := range counts {
		all = append(all, waits[i]...)
		total += counts[i]
		ne += errs[i]
		sum += float64(counts[i])
		sumsq += float64(counts[i]) * float64(counts[i])
	}
	sort.Slice(all, func(a, b int) bool { return all[a] < all[b] })
	pct := func(p float64) time.Duration {
		if len(all) == 0 {
			return 0
		}
		return all[int(math.Min(float64(len(all)-1), math.Ceil(p*float64(len(all)))-1))]
	}
	r := result{name: name, hold: hold, grants: total, errors: ne, secs: secs, p50: pct(0.50), p99: pct(0.99)}
	if len(all) > 0 {
		r.max = all[len(all)-1]
	}
	if total > 0 {
		r.cmdsPerGrant = float64(after-before) / float64(total)
	}
	if sumsq > 0 {
		r.jain = sum * sum / (float64(g) * sumsq)
	}
	return r
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startServer() (string, func(), string) {
	mod := os.Getenv("DLOCK_MODULE")
	if mod == "" {
		mod = "/work/main/target/release/libdlock.so"
	}
	bin := os.Getenv("REDIS_SERVER")
	if bin == "" {
		bin = "redis-server"
	}
	dir, _ := os.MkdirTemp("", "dlock-bench-go")
	port := freePort()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "server.log"), "--loadmodule", mod)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "start", bin, err)
		os.Exit(1)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	stop := func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = os.RemoveAll(dir) }
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	for i := 0; i < 500; i++ {
		if rdb.Ping(context.Background()).Err() == nil {
			v, _ := rdb.Info(context.Background(), "server").Result()
			ver := ""
			for _, line := range strings.Split(v, "\n") {
				if strings.HasPrefix(line, "redis_version:") || strings.HasPrefix(line, "valkey_version:") || strings.HasPrefix(line, "server_name:") {
					ver += strings.TrimSpace(line) + " "
				}
			}
			return addr, stop, strings.TrimSpace(ver)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	fmt.Fprintln(os.Stderr, "server did not start")
	os.Exit(1)
	return "", nil, ""
}

func main() {
	dur := flag.Duration("duration", 3*time.Second, "length of each run")
	g := flag.Int("goroutines", 64, "goroutines on the lock")
	out := flag.String("out", "", "write the markdown table here")
	addr := flag.String("addr", "", "use this server (with the module) instead of starting one")
	repeats := flag.Int("repeats", 3, "repeats of every cell, interleaved")
	only := flag.String("only", "", "run only the libraries whose name starts with this")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile here")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	ver := "given by -addr"
	if *addr == "" {
		a, stop, v := startServer()
		defer stop()
		*addr, ver = a, v
	}
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: *addr, PoolSize: 2 * *g, MinIdleConns: *g + 4})
	defer rdb.Close()
	if err := rdb.Do(ctx, "COMMAND", "INFO", "DLOCK.ACQUIRE").Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dl := dlock.New(rdb)
	rs := redsync.New(goredis.NewPool(rdb))
	rl := redislock.New(rdb)
	libs := []struct {
		name string
		l    locker
	}{
		{"dlock-go", dlockL{dl.Mutex("bench:dlock")}},
		{"go-redis Do(DLOCK.ACQUIRE … WAIT) (floor)", rawL{rdb, new(int64), new(sync.Mutex)}},
		{"redsync (defaults, tries unbounded)", redsyncL{rs, []redsync.Option{redsync.WithTries(math.MaxInt32)}}},
		{"redsync (retry delay 1 ms)", redsyncL{rs, []redsync.Option{redsync.WithTries(math.MaxInt32), redsync.WithRetryDelay(time.Millisecond)}}},
		{"redislock (linear 10 ms)", redislockL{rl, func() redislock.RetryStrategy { return redislock.LinearBackoff(10 * time.Millisecond) }}},
		{"redislock (linear 1 ms)", redislockL{rl, func() redislock.RetryStrategy { return redislock.LinearBackoff(time.Millisecond) }}},
	}
	holds := []time.Duration{0, time.Millisecond}
	// results[rep][hold][lib]: the cells are interleaved, repeat by repeat, so a burst
	// of load on the shared machine hits every library alike.
	results := make([][][]result, *repeats)
	for rep := range results {
		results[rep] = make([][]result, len(holds))
		for hi, hold := range holds {
			for _, lib := range libs {
				if !strings.HasPrefix(lib.name, *only) {
					continue
				}
				r := run(ctx, rdb, lib.name, lib.l, *g, hold, *dur)
				fmt.Printf("rep %d %-42s hold %-4s %8.0f grants/s  p50 %-10s p99 %-10s cmds/grant %6.2f  Jain %.3f  errors %d\n",
					rep+1, r.name, r.hold, r.rate(), r.p50.Round(time.Microsecond), r.p99.Round(time.Microsecond), r.cmdsPerGrant, r.jain, r.errors)
				results[rep][hi] = append(results[rep][hi], r)
			}
		}
	}
	med := func(xs []float64) float64 {
		sort.Float64s(xs)
		if len(xs) == 0 {
			return 0
		}
		if len(xs)%2 == 1 {
			return xs[len(xs)/2]
		}
		return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
	}
	span := func(xs []float64, f string) string {
		cp := append([]float64(nil), xs...)
		m := med(cp)
		if len(cp) < 2 {
			return fmt.Sprintf(f, m)
		}
		return fmt.Sprintf(f+" ("+f+"–"+f+")", m, cp[0], cp[len(cp)-1])
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	var b strings.Builder
	fmt.Fprintf(&b, "# Go clients on one lock: dlock-go vs redsync and redislock\n\n")
	fmt.Fprintf(&b, "`make bench-go` (bench/go), %s; %d goroutines on one lock, %s per cell, %d repeats interleaved (medians, with min–max); one go-redis client (pool %d); %s, GOMAXPROCS %d, %s; load average at the end: %s.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), *g, *dur, *repeats, 2**g, ver, runtime.GOMAXPROCS(0), runtime.Version(), loadavg())
	fmt.Fprintf(&b, "| library | hold | grants/s | p50 wait ms | p99 wait ms | commands/grant | Jain | errors |\n|---|---|---|---|---|---|---|---|\n")
	nlib := len(results[0][0])
	for hi, hold := range holds {
		for li := 0; li < nlib; li++ {
			var rate, p50, p99, cpg, jain []float64
			errs := 0
			for rep := range results {
				r := results[rep][hi][li]
				rate = append(rate, r.rate())
				p50 = append(p50, ms(r.p50))
				p99 = append(p99, ms(r.p99))
				cpg = append(cpg, r.cmdsPerGrant)
				jain = append(jain, r.jain)
				errs += r.errors
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %d |\n", results[0][hi][li].name, hold,
				span(rate, "%.0f"), span(p50, "%.2f"), span(p99, "%.1f"), span(cpg, "%.2f"), span(jain, "%.3f"), errs)
		}
	}
	fmt.Fprintf(&b, "\nRatios of dlock-go to each library, taken within each repeat, then their median (grants/s: above 1 is better for dlock; p99 wait: below 1 is better for dlock):\n\n")
	fmt.Fprintf(&b, "| hold | against | grants/s × | p99 wait × |\n|---|---|---|---|\n")
	goal := ""
	for hi, hold := range holds {
		for li := 0; li < nlib; li++ {
			name := results[0][hi][li].name
			if name == "dlock-go" || strings.HasPrefix(name, "go-redis") {
				continue
			}
			var gr, pr, jd []float64
			for rep := range results {
				var d result
				for _, r := range results[rep][hi] {
					if r.name == "dlock-go" {
						d = r
					}
				}
				r := results[rep][hi][li]
				if r.grants == 0 || d.grants == 0 {
					continue
				}
				gr = append(gr, d.rate()/r.rate())
				pr = append(pr, float64(d.p99)/float64(r.p99))
				jd = append(jd, d.jain)
			}
			if len(gr) == 0 {
				continue
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", hold, name, span(gr, "%.2f"), span(pr, "%.3f"))
			fmt.Printf("ratio hold %-4s vs %-38s grants/s %s  p99 %s\n", hold, name, span(gr, "%.2f"), span(pr, "%.3f"))
			if hold == 0 && strings.HasPrefix(name, "redsync (defaults") {
				ok := func(b bool) string {
					if b {
						return "met"
					}
					return "MISSED"
				}
				g, p, j := med(gr), med(pr), med(jd)
				goal = fmt.Sprintf("\nGoal at 0 hold against redsync (defaults), medians of the per-repeat ratios: grants/s ≥ 2× — %.2f× %s; p99 wait ≤ 0.1× — %.3f× %s; Jain ≥ 0.99 — %.3f %s.\n",
					g, ok(g >= 2), p, ok(p <= 0.1), j, ok(j >= 0.99))
			}
		}
	}
	b.WriteString(goal)
	fmt.Print(goal)
	b.WriteString(notes)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(b.String()), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
}

const notes = `
How the libraries wait: dlock-go sends DLOCK.ACQUIRE … WAIT (slices of 2 s) and the
server hands the lock to the next waiter in arrival order on each release: one grant
per release, 2 commands per grant. redsync retries SET NX after a random 50–250 ms
pause (its default; tries unbounded here so that none fail) and redislock after a fixed
pause (10 ms or 1 ms); the "1 ms" rows show what shorter pauses cost in commands.

Reading the 0 ms row: a redsync or redislock goroutine that releases takes the lock
again at once while the others sleep in their retry pause (barging), so its grants/s is
one goroutine's release + SET NX round trips, and fairness and the p99 wait suffer for it.
dlock's grants/s is bounded by the server's handoff (release → the next waiter's reply),
which costs about as much as one more round trip on this machine: at best about one
handoff per two of redsync's round trips, so near 2× and, on a loaded 2-core machine,
below it (see the goal line), while every waiter is served in turn (Jain 1.000) and the
p99 wait is a small fraction of redsync's.
The go-redis row sends the same two commands with go-redis alone (no watchdog, no
hold, no context handling): the floor of any Go client on them; dlock-go lands within
the noise of it, so the bound is the server's handoff, not the client.
Absolute figures move by ±30 % between runs on a shared machine; ratios within one run
hold better.
`
