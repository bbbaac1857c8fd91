// Command driver is the Go client's conformance driver (conformance/README.md): it
// reads JSON Lines requests on stdin, drives the client's public API on go-redis v9,
// and writes one reply per request and a "lost" event per lost hold on stdout.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	dlock "github.com/dlock/dlock/clients/go"
)

type request struct {
	ID      int64          `json:"id"`
	Op      string         `json:"op"`
	URL     string         `json:"url"`
	Options map[string]any `json:"options"`
	Handle  string         `json:"handle"`
	Key     string         `json:"key"`
	Keys    []string       `json:"keys"`
	Kind    string         `json:"kind"`
	LeaseMs *int64         `json:"lease_ms"`
	WaitMs  int64          `json:"wait_ms"`
	Bind    bool           `json:"bind"`
	Limit   int64          `json:"limit"`
	Permits int64          `json:"permits"`
	Owner   string         `json:"owner"`
	Name    string         `json:"name"`
	Value   string         `json:"value"`
}

// held is one handle: what Unlock and Done act on.
type held struct {
	done   <-chan struct{}
	err    func() error
	reason func() dlock.LostReason
	unlock func(ctx context.Context) (dlock.Unlock, error)
}

type driver struct {
	out     sync.Mutex
	w       *bufio.Writer
	mu      sync.Mutex
	rdb     *redis.Client
	c       *dlock.Client
	bind    bool
	replica int
	handles map[string]*held
}

func (d *driver) send(v map[string]any) {
	b, err := json.Marshal(v)
	if err != nil {
		b, _ = json.Marshal(map[string]any{"id": v["id"], "ok": false, "error": map[string]any{"kind": "other", "message": err.Error()}})
	}
	d.out.Lock()
	defer d.out.Unlock()
	_, _ = d.w.Write(append(b, '\n'))
	_ = d.w.Flush()
}

func (d *driver) ok(id int64, fields map[string]any) {
	m := map[string]any{"id": id, "ok": true}
	for k, v := range fields {
		m[k] = v
	}
	d.send(m)
}

func (d *driver) fail(id int64, e map[string]any) {
	d.send(map[string]any{"id": id, "ok": false, "error": e})
}

// errorOf maps a client error to the contract's kinds.
func errorOf(err error) map[string]any {
	e := map[string]any{"message": err.Error()}
	var ie *dlock.InvalidArgumentError
	var de *dlock.DeadlockError
	var le *dlock.LostError
	switch {
	case errors.As(err, &ie):
		e["kind"], e["argument"] = "invalid_argument", ie.Argument
	case errors.Is(err, dlock.ErrTimeout), errors.Is(err, dlock.ErrNotAcquired), errors.Is(err, context.DeadlineExceeded):
		e["kind"] = "timeout"
	case errors.Is(err, dlock.ErrWrongKind):
		e["kind"] = "wrong_kind"
	case errors.Is(err, dlock.ErrModuleNotLoaded):
		e["kind"] = "module_not_loaded"
	case errors.As(err, &de):
		cycle := make([][]string, 0, len(de.Cycle))
		for _, s := range de.Cycle {
			cycle = append(cycle, []string{s.Key, s.Owner})
		}
		e["kind"], e["cycle"] = "deadlock", cycle
	case errors.Is(err, dlock.ErrQueueFull):
		e["kind"] = "queue_full"
	case errors.Is(err, dlock.ErrNotDurable), errors.Is(err, dlock.ErrNoReplicas):
		e["kind"] = "not_durable"
	case errors.As(err, &le):
		e["kind"], e["reason"] = "lost", string(le.Reason)
	case errors.Is(err, dlock.ErrNotHeld), errors.Is(err, dlock.ErrLost):
		e["kind"], e["reason"] = "lost", "not_held"
	case errors.Is(err, dlock.ErrConnection):
		e["kind"] = "connection"
	default:
		e["kind"] = "other"
	}
	return e
}

func ms(v any) (time.Duration, bool) {
	f, ok := v.(float64)
	return time.Duration(f) * time.Millisecond, ok
}

func (d *driver) open(r *request) {
	opt, err := redis.ParseURL(r.URL)
	if err != nil {
		d.fail(r.ID, map[string]any{"kind": "invalid_argument", "argument": "url", "message": err.Error()})
		return
	}
	var o dlock.Options
	for k, v := range r.Options {
		switch k {
		case "watchdog_lease_ms":
			o.Lease, _ = ms(v)
		case "renew_interval_ms":
			o.RenewInterval, _ = ms(v)
		case "transport_timeout_ms":
			opt.ReadTimeout, _ = ms(v)
		case "bind":
			b, _ := v.(bool)
			d.mu.Lock()
			d.bind = b
			d.mu.Unlock()
		case "replicas":
			n, _ := v.(float64)
			d.mu.Lock()
			d.replica = int(n)
			d.mu.Unlock()
		case "wait_mode":
			if v != "server" {
				d.fail(r.ID, map[string]any{"kind": "unsupported", "message": fmt.Sprintf("the Go client waits on the server only (wait_mode %v)", v)})
				return
			}
		default:
			d.fail(r.ID, map[string]any{"kind": "unsupported", "message": "option " + k})
			return
		}
	}
	rdb := redis.NewClient(opt)
	c, err := dlock.NewClient(rdb, o)
	d.mu.Lock()
	d.rdb = rdb
	if err != nil {
		// Keep a client whose every call refuses the same options, for the requests
		// that follow.
		d.c = dlock.New(rdb, o)
	} else {
		d.c = c
	}
	d.mu.Unlock()
	if err != nil {
		d.fail(r.ID, errorOf(err))
		return
	}
	d.ok(r.ID, nil)
}

func (d *driver) client() (*dlock.Client, bool, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.c, d.bind, d.replica
}

// watch sends the handle's lost event when its loss signal fires (Done closed with
// an error).
func (d *driver) watch(handle string, h *held) {
	d.mu.Lock()
	d.handles[handle] = h
	d.mu.Unlock()
	go func() {
		<-h.done
		if h.err() != nil {
			d.send(map[string]any{"event": "lost", "handle": handle, "reason": string(h.reason())})
		}
	}()
}

// waitCtx is the context of an acquire: wait_ms absent or 0 is one try.
func waitCtx(waitMs int64) (context.Context, context.CancelFunc, bool) {
	if waitMs <= 0 {
		return context.Background(), func() {}, false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(waitMs)*time.Millisecond)
	return ctx, cancel, true
}

func holdOf(h *dlock.Hold) *held {
	return &held{done: h.Done(), err: h.Err, reason: h.Reason, unlock: h.Unlock}
}

func (d *driver) acquire(r *request) {
	c, bind, replicas := d.client()
	if c == nil {
		d.fail(r.ID, map[string]any{"kind": "other", "message": "acquire before open"})
		return
	}
	var opts []dlock.LockOption
	if r.LeaseMs != nil {
		opts = append(opts, dlock.WithLease(time.Duration(*r.LeaseMs)*time.Millisecond))
	}
	if r.Bind || bind {
		opts = append(opts, dlock.WithBind())
	}
	if replicas > 0 {
		opts = append(opts, dlock.WithReplicas(replicas, time.Second))
	}
	if r.Owner != "" {
		opts = append(opts, dlock.WithOwner(r.Owner))
	}
	ctx, cancel, wait := waitCtx(r.WaitMs)
	defer cancel()
	var h *dlock.Hold
	var err error
	switch r.Kind {
	case "mutex", "fair":
		m := c.Mutex(r.Key, opts...)
		if r.Kind == "fair" {
			m = c.FairMutex(r.Key, opts...)
		}
		if wait {
			h, err = m.Lock(ctx)
		} else {
			h, err = m.TryLock(ctx)
		}
	case "read", "write":
		rw := c.RWMutex(r.Key, opts...)
		switch {
		case r.Kind == "read" && wait:
			h, err = rw.RLock(ctx)
		case r.Kind == "read":
			h, err = rw.TryRLock(ctx)
		case wait:
			h, err = rw.Lock(ctx)
		default:
			h, err = rw.TryLock(ctx)
		}
	case "semaphore":
		limit, permits := r.Limit, r.Permits
		if limit == 0 {
			limit = 1
		}
		if permits == 0 {
			permits = 1
		}
		sem := c.Semaphore(r.Key, limit, opts...)
		if wait {
			err = sem.Acquire(ctx, permits)
		} else {
			var got bool
			got, err = sem.TryAcquireErr(ctx, permits)
			if err == nil && !got {
				err = dlock.ErrNotAcquired
			}
		}
		if err == nil {
			h = sem.Hold()
			held := holdOf(h)
			held.unlock = func(ctx context.Context) (dlock.Unlock, error) {
				err := sem.ReleaseCtx(ctx, permits)
				switch {
				case err == nil:
					return dlock.Released, nil
				case errors.Is(err, dlock.ErrNotHeld):
					return dlock.Lost, nil
				}
				return dlock.Unknown, err
			}
			d.watch(r.Handle, held)
			d.ok(r.ID, map[string]any{"token": h.Token()})
			return
		}
	default:
		d.fail(r.ID, map[string]any{"kind": "unsupported", "message": "kind " + r.Kind})
		return
	}
	if err != nil {
		d.fail(r.ID, errorOf(err))
		return
	}
	d.watch(r.Handle, holdOf(h))
	d.ok(r.ID, map[string]any{"token": h.Token()})
}

func (d *driver) acquireMulti(r *request) {
	c, bind, _ := d.client()
	var opts []dlock.LockOption
	if r.LeaseMs != nil {
		opts = append(opts, dlock.WithLease(time.Duration(*r.LeaseMs)*time.Millisecond))
	}
	if r.Bind || bind {
		opts = append(opts, dlock.WithBind())
	}
	lockers := make([]dlock.Locker, 0, len(r.Keys))
	for _, k := range r.Keys {
		lockers = append(lockers, c.Mutex(k, opts...))
	}
	ml := dlock.NewMultiLock(lockers...)
	ctx, cancel, wait := waitCtx(r.WaitMs)
	defer cancel()
	var mh *dlock.MultiHold
	var err error
	if wait {
		mh, err = ml.Lock(ctx)
	} else {
		mh, err = ml.TryLock(ctx)
	}
	if err != nil {
		d.fail(r.ID, errorOf(err))
		return
	}
	tokens := make([]int64, 0, len(mh.Holds()))
	for _, h := range mh.Holds() {
		tokens = append(tokens, h.Token())
	}
	d.watch(r.Handle, &held{done: mh.Done(), err: mh.Err, reason: mh.Reason, unlock: mh.Unlock})
	d.ok(r.ID, map[string]any{"tokens": tokens})
}

func (d *driver) campaign(r *request) {
	c, _, _ := d.client()
	e := c.Election(r.Name, dlock.WithBind())
	ctx, cancel := context.WithCancel(context.Background())
	if r.WaitMs > 0 {
		ctx, cancel = context.WithTimeout(context.Background(), time.Duration(r.WaitMs)*time.Millisecond)
	}
	defer cancel()
	if err := e.Campaign(ctx, r.Value); err != nil {
		d.fail(r.ID, errorOf(err))
		return
	}
	term := e.Term()
	d.watch(r.Handle, &held{done: term.Done(), err: term.Err, reason: term.Reason,
		unlock: func(ctx context.Context) (dlock.Unlock, error) {
			err := e.Resign(ctx)
			switch {
			case err == nil:
				return dlock.Released, nil
			case errors.Is(err, dlock.ErrNotLeader):
				return dlock.Lost, nil
			case errors.Is(err, dlock.ErrUnknown):
				return dlock.Unknown, err
			}
			return 0, err
		}})
	d.ok(r.ID, map[string]any{"key": e.Key()})
}

func (d *driver) handle(r *request) (*held, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	h, ok := d.handles[r.Handle]
	if !ok {
		d.fail(r.ID, map[string]any{"kind": "other", "message": fmt.Sprintf("no handle %q (it never held)", r.Handle)})
	}
	return h, ok
}

func (d *driver) unlock(r *request) {
	h, ok := d.handle(r)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	u, err := h.unlock(ctx)
	switch u {
	case dlock.Released:
		d.ok(r.ID, map[string]any{"result": "released"})
	case dlock.StillHeld:
		d.ok(r.ID, map[string]any{"result": "still_held"})
	case dlock.Lost:
		d.ok(r.ID, map[string]any{"result": "lost"})
	case dlock.Unknown:
		d.ok(r.ID, map[string]any{"result": "unknown", "error": errorOf(err)})
	default:
		if err == nil {
			err = fmt.Errorf("unlock answered %v", u)
		}
		d.fail(r.ID, errorOf(err))
	}
}

func (d *driver) held(r *request) {
	h, ok := d.handle(r)
	if !ok {
		return
	}
	select {
	case <-h.done:
		d.ok(r.ID, map[string]any{"held": false})
	default:
		d.ok(r.ID, map[string]any{"held": h.err() == nil})
	}
}

func (d *driver) close(r *request) {
	d.mu.Lock()
	c, rdb := d.c, d.rdb
	d.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
	if rdb != nil {
		_ = rdb.Close() // a second close answers "client is closed": both are closed
	}
	d.ok(r.ID, nil)
}

func main() {
	d := &driver{w: bufio.NewWriter(os.Stdout), handles: map[string]*held{}}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	for in.Scan() {
		var r request
		if err := json.Unmarshal(in.Bytes(), &r); err != nil {
			fmt.Fprintf(os.Stderr, "driver: a request that is not JSON: %v: %s\n", err, in.Text())
			continue
		}
		if r.Op == "exit" {
			d.ok(r.ID, nil)
			return // without closing anything
		}
		go func(r *request) {
			switch r.Op {
			case "open":
				d.open(r)
			case "acquire":
				d.acquire(r)
			case "acquire_multi":
				d.acquireMulti(r)
			case "campaign":
				d.campaign(r)
			case "unlock":
				d.unlock(r)
			case "held":
				d.held(r)
			case "close":
				d.close(r)
			default:
				d.fail(r.ID, map[string]any{"kind": "unsupported", "message": "op " + r.Op})
			}
		}(&r)
	}
}
