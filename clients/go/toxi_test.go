package dlock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// toxiproxyBin is Toxiproxy's server: TOXIPROXY_SERVER, else what `go install
// github.com/Shopify/toxiproxy/v2/cmd/server` put in GOPATH/bin (scripts/deps.sh go
// installs it), else toxiproxy-server on PATH.
func toxiproxyBin(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("TOXIPROXY_SERVER"); p != "" {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		p := filepath.Join(strings.TrimSpace(string(out)), "bin", "server")
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	if p, err := exec.LookPath("toxiproxy-server"); err == nil {
		return p
	}
	t.Fatal("no Toxiproxy server: run scripts/deps.sh go (it installs one with go install), or set TOXIPROXY_SERVER")
	return ""
}

// proxy is one Toxiproxy proxy in front of a test server, on a Toxiproxy of its own
// (started on a free loopback port and stopped by its PID when the test ends).
type proxy struct {
	t    testing.TB
	api  string
	name string
	addr string // where clients connect
}

func startProxy(t testing.TB, upstream string) *proxy {
	t.Helper()
	apiPort := freePort(t)
	cmd := exec.Command(toxiproxyBin(t), "-host", "127.0.0.1", "-port", fmt.Sprint(apiPort))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("start Toxiproxy: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	})
	p := &proxy{t: t, api: fmt.Sprintf("http://127.0.0.1:%d", apiPort), name: "dlock"}
	deadline := time.Now().Add(15 * time.Second)
	for {
		if resp, err := http.Get(p.api + "/version"); err == nil {
			resp.Body.Close()
			break
		}
		select {
		case <-exited:
			t.Fatalf("Toxiproxy exited at start: %s", logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("Toxiproxy did not answer on %s within 15 s", p.api)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.addr = fmt.Sprintf("127.0.0.1:%d", freePort(t))
	p.call("POST", "/proxies", map[string]any{"name": p.name, "listen": p.addr, "upstream": upstream, "enabled": true})
	return p
}

func (p *proxy) call(method, path string, body any) {
	p.t.Helper()
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(context.Background(), method, p.api+path, bytes.NewReader(b))
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("Toxiproxy %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var msg bytes.Buffer
		_, _ = msg.ReadFrom(resp.Body)
		p.t.Fatalf("Toxiproxy %s %s: %s %s", method, path, resp.Status, msg.String())
	}
}

// partition stalls both directions without closing anything: Toxiproxy's timeout
// toxic with timeout 0 (a silent partition).
func (p *proxy) partition() {
	for _, stream := range []string{"upstream", "downstream"} {
		p.call("POST", "/proxies/"+p.name+"/toxics", map[string]any{
			"name": "cut-" + stream, "type": "timeout", "stream": stream, "toxicity": 1.0,
			"attributes": map[string]any{"timeout": 0},
		})
	}
}

// heal removes the partition.
func (p *proxy) heal() {
	for _, stream := range []string{"upstream", "downstream"} {
		p.call("DELETE", "/proxies/"+p.name+"/toxics/cut-"+stream, nil)
	}
}
