package dlock_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// The module and server the tests start, as the Makefile passes them; the default
// module path is a developer fallback only.
func modulePath() string {
	if p := os.Getenv("DLOCK_MODULE"); p != "" {
		return p
	}
	return "/work/main/target/release/libdlock.so"
}

func serverBin() string {
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		return p
	}
	return "redis-server"
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("no free loopback port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type server struct {
	addr string
	port int
	dir  string
	cmd  *exec.Cmd
}

// startServer starts a server with the module on a free loopback port and stops it
// (by its PID) when the test ends, also when it fails. extra: more server arguments;
// moduleArgs: arguments after the module path.
func startServer(t testing.TB, moduleArgs []string, extra ...string) *server {
	t.Helper()
	mod := modulePath()
	if _, err := os.Stat(mod); err != nil {
		t.Fatalf("DLOCK_MODULE %s: %v (build it with cargo build --release, or set DLOCK_MODULE)", mod, err)
	}
	var s *server
	for attempt := 0; attempt < 3; attempt++ {
		s = tryStart(t, append([]string{"--loadmodule", mod}, moduleArgs...), extra)
		if s != nil {
			return s
		}
	}
	t.Fatalf("could not start %s with %s", serverBin(), mod)
	return nil
}

// startPlain starts a server without the module.
func startPlain(t testing.TB) *server {
	t.Helper()
	for attempt := 0; attempt < 3; attempt++ {
		if s := tryStart(t, nil, nil); s != nil {
			return s
		}
	}
	t.Fatalf("could not start %s", serverBin())
	return nil
}

func tryStart(t testing.TB, module []string, extra []string) *server {
	t.Helper()
	port := freePort(t)
	dir := t.TempDir()
	args := []string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "server.log")}
	args = append(args, extra...)
	args = append(args, module...)
	cmd := exec.Command(serverBin(), args...)
	cmd.Dir = dir
	// The server dies with the test process, even when the test binary is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", serverBin(), err)
	}
	s := &server{addr: fmt.Sprintf("127.0.0.1:%d", port), port: port, dir: dir, cmd: cmd}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			if strings.Contains(string(log), "Address already in use") {
				return nil
			}
			t.Fatalf("%s exited at start; its log:\n%s", serverBin(), log)
		default:
		}
		if rdb.Ping(context.Background()).Err() == nil {
			return s
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s did not answer PING on %s within 15 s", serverBin(), s.addr)
	return nil
}

func (s *server) client(t testing.TB) *redis.Client {
	t.Helper()
	// Maintenance notifications off: in their default auto mode go-redis v9.23 writes
	// the shared Options on the first handshake that the server refuses (Redis 7.0
	// has no CLIENT MAINT_NOTIFICATIONS) under the lock of a Conn (a BIND hold's) while
	// Subscribe copies them under the Client's, which go test -race reports.
	rdb := redis.NewClient(&redis.Options{Addr: s.addr,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// hasCommand reports whether the server knows the command (e.g. DLOCK.CANCEL).
func hasCommand(t testing.TB, rdb *redis.Client, name string) bool {
	t.Helper()
	v, err := rdb.Do(context.Background(), "COMMAND", "INFO", name).Slice()
	if err != nil {
		t.Fatalf("COMMAND INFO %s: %v", name, err)
	}
	return len(v) > 0 && v[0] != nil
}
