package approver

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/internal/bus"
	"github.com/toolgate/toolgate/internal/fate"
	"github.com/toolgate/toolgate/pkg/approval"
	"github.com/toolgate/toolgate/pkg/events"
)

// RequestsConsumer is the configuration of the approver's durable consumer
// of approval requests (it drives notifications, so none is lost while
// the approver is down).
func RequestsConsumer() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       bus.ConsumerApprover,
		Description:   "approval requests, notified by the approver service",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       time.Minute,
		MaxDeliver:    5,
		MaxAckPending: 256,
		FilterSubject: approval.SubjectRequests,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// notify delivers one request to every webhook, each on its own, and says
// the request is done once all deliveries ended (a delivery that failed
// after its retries is logged, not retried again: people still see the
// call on the page). An unreadable request is terminated.
func (s *Server) notify(ctx context.Context, msg fate.Message) fate.Fate {
	var req approval.Request
	if _, err := events.DecodeData(msg.Headers(), msg.Data(), &req); err != nil {
		s.log.Warn("unreadable approval request", "subject", msg.Subject(), "err", err)
		return fate.Term("unreadable approval request")
	}
	if p, err := s.get(ctx, req.CallID); err != nil || p.Status != approval.Pending {
		return fate.Ack() // decided or gone: nobody needs telling
	}
	var wg sync.WaitGroup
	for _, hook := range s.cfg.Webhooks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, err := Body(hook, req, s.cfg.PublicURL)
			if err != nil {
				s.log.Error("render notification", "call_id", req.CallID, "err", err)
				return
			}
			n, err := s.cfg.Notifier.Deliver(ctx, hook, body)
			if err != nil {
				s.log.Warn("notification not delivered", "call_id", req.CallID, "webhook", redact(hook.URL), "attempts", n, "err", err)
				return
			}
			s.log.Info("notification delivered", "call_id", req.CallID, "webhook", redact(hook.URL), "attempts", n)
		}()
	}
	wg.Wait()
	return fate.Ack()
}
