package approver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/parking"
)

// get reads the parked call callID from the bucket (by its id alone: a
// decision names a call id; two agents' calls of one id are ambiguous).
func (s *Server) get(ctx context.Context, callID string) (*parking.Parked, error) {
	p, _, err := parking.GetParked(ctx, s.kv, "", callID)
	if errors.Is(err, parking.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, callID)
	}
	return p, err
}

// watch mirrors the parked calls for the page's live view.
func (s *Server) watch(ctx context.Context) {
	bus.WatchKV(ctx, s.kv, "call.>", s.log, func(e jetstream.KeyValueEntry) {
		if e == nil {
			s.changed()
			return
		}
		s.mu.Lock()
		if e.Operation() != jetstream.KeyValuePut {
			delete(s.calls, e.Key())
		} else {
			var p parking.Parked
			if json.Unmarshal(e.Value(), &p) == nil {
				s.calls[e.Key()] = &p
			}
		}
		s.mu.Unlock()
		s.changed()
	})
}

// resync re-reads the parked calls every 10 seconds, in case the watch
// went quiet (as after a server restart), and refreshes the page when
// they differ.
func (s *Server) resync(ctx context.Context) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		all, err := parking.List(ctx, s.kv)
		if err != nil {
			continue
		}
		fresh := make(map[string]*parking.Parked, len(all))
		for _, p := range all {
			fresh[parking.CallKey(p.Agent, p.CallID)] = p
		}
		s.mu.Lock()
		same := len(fresh) == len(s.calls)
		for k, p := range fresh {
			if old, ok := s.calls[k]; !ok || old.Status != p.Status || len(old.Approvals) != len(p.Approvals) {
				same = false
			}
		}
		s.calls = fresh
		s.mu.Unlock()
		if !same {
			s.changed()
		}
	}
}

func (s *Server) changed() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.subs {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

func (s *Server) subscribe() (chan struct{}, func()) {
	c := make(chan struct{}, 1)
	s.mu.Lock()
	s.subs[c] = true
	s.mu.Unlock()
	return c, func() { s.mu.Lock(); delete(s.subs, c); s.mu.Unlock() }
}
