package dlock

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// linger is how long a channel stays subscribed after its last hold ended: a lock
// taken again soon needs no new SUBSCRIBE (nor the CHECK that follows one).
const linger = 2 * time.Second

// notifier is a Client's one subscriber connection (one per shard master in a
// cluster, with SSUBSCRIBE): it listens on the channel of every lock the Client holds
// and has each hold on that key checked at once on any message (docs/clients.md, rule
// 2). go-redis reconnects it and subscribes again after a failure; every subscription
// confirmation — the first and those after a reconnect — checks the channel's holds
// too, since notices sent in between were missed.
type notifier struct {
	c          *Client
	mu         sync.Mutex
	holds      map[string]map[*Hold]struct{} // by channel
	idle       map[string]time.Time          // subscribed channels without holds, since
	subscribed map[string]*subscriber        // channel → the subscriber it was sent on
	subs       map[string]*subscriber        // by shard master address ("" on one node)
	wake       chan struct{}
	running    bool
	closed     bool
}

type subscriber struct {
	ps        *redis.PubSub
	sharded   bool
	receiving bool // its receive loop runs (started after its first SUBSCRIBE, which
	// picks the node in a cluster)
}

func newNotifier(c *Client) *notifier {
	return &notifier{c: c, holds: map[string]map[*Hold]struct{}{}, idle: map[string]time.Time{},
		subscribed: map[string]*subscriber{}, subs: map[string]*subscriber{}, wake: make(chan struct{}, 1)}
}

// add listens for h (a new hold).
func (n *notifier) add(h *Hold) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	set := n.holds[h.channel]
	if set == nil {
		set = map[*Hold]struct{}{}
		n.holds[h.channel] = set
	}
	set[h] = struct{}{}
	delete(n.idle, h.channel)
	if _, ok := n.subscribed[h.channel]; ok {
		return
	}
	if !n.running {
		n.running = n.c.spawn(n.run)
	}
	n.poke()
}

// remove stops listening for h (it ended).
func (n *notifier) remove(h *Hold) {
	n.mu.Lock()
	defer n.mu.Unlock()
	set := n.holds[h.channel]
	if _, ok := set[h]; !ok {
		return
	}
	delete(set, h)
	if len(set) == 0 {
		delete(n.holds, h.channel)
		if _, ok := n.subscribed[h.channel]; ok {
			n.idle[h.channel] = time.Now()
			n.poke()
		}
	}
}

func (n *notifier) poke() {
	select {
	case n.wake <- struct{}{}:
	default:
	}
}

// close closes the subscriber connections and returns the holds still listened for.
func (n *notifier) close() []*Hold {
	n.mu.Lock()
	n.closed = true
	var holds []*Hold
	for _, set := range n.holds {
		for h := range set {
			holds = append(holds, h)
		}
	}
	subs := n.subs
	n.subs = map[string]*subscriber{}
	n.mu.Unlock()
	for _, s := range subs {
		_ = s.ps.Close()
	}
	return holds
}

func (n *notifier) isClosed() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.closed
}

// run subscribes the channels of new holds and unsubscribes those idle for linger,
// until the Client is closed.
func (n *notifier) run() {
	t := time.NewTimer(linger)
	defer t.Stop()
	for {
		select {
		case <-n.c.quit:
			return
		case <-n.wake:
		case <-t.C:
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(n.reconcile())
	}
}

// reconcile sends the SUBSCRIBEs and UNSUBSCRIBEs due; it returns when to look again.
func (n *notifier) reconcile() time.Duration {
	n.mu.Lock()
	var toSub, toUnsub []string
	for ch := range n.holds {
		if _, ok := n.subscribed[ch]; !ok {
			toSub = append(toSub, ch)
		}
	}
	now, next := time.Now(), linger
	for ch, since := range n.idle {
		if left := linger - now.Sub(since); left <= 0 {
			toUnsub = append(toUnsub, ch)
		} else if left < next {
			next = left
		}
	}
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), n.c.opts.CommandTimeout)
	defer cancel()
	for _, ch := range toSub {
		s, err := n.subscriber(ctx, ch)
		if err == nil {
			if s.sharded {
				err = s.ps.SSubscribe(ctx, ch)
			} else {
				err = s.ps.Subscribe(ctx, ch)
			}
		}
		if err != nil {
			// Not subscribed (the server is out of reach): the holds fall back to their
			// lease clocks; tried again shortly.
			if next > 200*time.Millisecond {
				next = 200 * time.Millisecond
			}
			continue
		}
		n.mu.Lock()
		n.subscribed[ch] = s
		start := !s.receiving
		s.receiving = true
		n.mu.Unlock()
		if start {
			n.c.spawn(func() { n.receive(s) })
		}
	}
	for _, ch := range toUnsub {
		n.mu.Lock()
		s := n.subscribed[ch]
		_, idle := n.idle[ch]
		if idle && len(n.holds[ch]) == 0 {
			delete(n.subscribed, ch)
			delete(n.idle, ch)
		} else {
			s = nil
		}
		n.mu.Unlock()
		if s == nil {
			continue
		}
		if s.sharded {
			_ = s.ps.SUnsubscribe(ctx, ch)
		} else {
			_ = s.ps.Unsubscribe(ctx, ch)
		}
	}
	return next
}

// subscriber is the subscriber connection for channel ch: the Client's one, or in a
// cluster the one of the shard master serving ch's slot.
func (n *notifier) subscriber(ctx context.Context, ch string) (*subscriber, error) {
	addr := ""
	cc, cluster := n.c.rdb.(*redis.ClusterClient)
	if cluster {
		node, err := cc.MasterForKey(ctx, ch)
		if err != nil {
			return nil, err
		}
		addr = node.Options().Addr
	}
	n.mu.Lock()
	s := n.subs[addr]
	closed := n.closed
	n.mu.Unlock()
	if s != nil || closed {
		if closed {
			return nil, ErrClosed
		}
		return s, nil
	}
	if cluster {
		// go-redis picks the node of a sharded subscription by its first channel.
		s = &subscriber{ps: cc.SSubscribe(ctx), sharded: true}
	} else {
		s = &subscriber{ps: n.c.rdb.Subscribe(ctx)}
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		_ = s.ps.Close()
		return nil, ErrClosed
	}
	n.subs[addr] = s
	n.mu.Unlock()
	return s, nil
}

// receive reads one subscriber connection until the Client is closed.
func (n *notifier) receive(s *subscriber) {
	for {
		msg, err := s.ps.Receive(context.Background())
		if err != nil {
			if n.isClosed() {
				return
			}
			// A broken connection: go-redis reconnects and subscribes again at the next
			// Receive (whose confirmations check the holds).
			select {
			case <-n.c.quit:
				return
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" || m.Kind == "ssubscribe" {
				n.dispatch(m.Channel, "")
			}
		case *redis.Message:
			n.dispatch(m.Channel, m.Payload)
		}
	}
}

// dispatch has every hold on channel ch checked after the notice msg.
func (n *notifier) dispatch(ch, msg string) {
	n.mu.Lock()
	holds := make([]*Hold, 0, len(n.holds[ch]))
	for h := range n.holds[ch] {
		holds = append(holds, h)
	}
	n.mu.Unlock()
	for _, h := range holds {
		h.notice(msg)
	}
}
