// Package bus provisions the JetStream streams, consumers and key-value
// buckets toolgate runs on, idempotently, and names them in one place.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/toolgate/toolgate/pkg/events"
)

// Stream, consumer and bucket names.
const (
	// StreamCalls is the work queue of calls (toolgate.call.>).
	StreamCalls = "TOOLGATE_CALLS"
	// StreamResults retains results (toolgate.result.>).
	StreamResults = "TOOLGATE_RESULTS"
	// StreamEvents retains domain events (toolgate.event.>).
	StreamEvents = "TOOLGATE_EVENTS"
	// StreamAudit retains audit events (toolgate.audit.>).
	StreamAudit = "TOOLGATE_AUDIT"
	// StreamApprovals retains approval requests and decisions (toolgate.approval.>).
	StreamApprovals = "TOOLGATE_APPROVALS"
	// StreamDeadLetter keeps calls that exhausted their deliveries.
	StreamDeadLetter = "TOOLGATE_DLQ"
	// StreamAdvisories keeps the server's max-deliveries advisories of
	// the workers consumer until a worker has dead-lettered the call.
	StreamAdvisories = "TOOLGATE_ADVISORIES"
	// StreamTasks is the work queue of delegated tasks (toolgate.task.>),
	// one consumer per target agent.
	StreamTasks = "TOOLGATE_TASKS"
	// StreamTaskResults retains the answers to delegated tasks
	// (toolgate.task_result.>).
	StreamTaskResults = "TOOLGATE_TASK_RESULTS"

	// ConsumerWorkers is the durable pull consumer every worker shares.
	ConsumerWorkers = "workers"
	// ConsumerApprovalDecisions is the durable consumer of decisions that
	// every worker shares.
	ConsumerApprovalDecisions = "decisions"
	// ConsumerApprover is the approver service's durable consumer of requests.
	ConsumerApprover = "approver"
	// ConsumerDeadLetters is the durable consumer of max-deliveries
	// advisories every worker shares.
	ConsumerDeadLetters = "deadletters"

	// BucketCalls holds one record per call id: the idempotency claim and
	// the stored result.
	BucketCalls = "toolgate_calls"
	// BucketPolicy holds the shared policy document and amendments.
	BucketPolicy = "toolgate_policy"
	// BucketApprovals holds parked calls keyed by call id.
	BucketApprovals = "toolgate_approvals"
	// BucketBudgets holds the usage of each budget counter.
	BucketBudgets = "toolgate_budgets"
	// BucketCancels holds the ids of cancelled calls (agent.call id).
	BucketCancels = "toolgate_cancels"
	// BucketTasks holds one record per delegated task, keyed
	// <target agent>.<task id>: who delegated it, the allowed tools, and
	// what the task's calls did.
	BucketTasks = "toolgate_tasks"
	// BucketCache holds cached results of read-only tools and the
	// workspace generations that invalidate them.
	BucketCache = "toolgate_cache"
)

// BudgetRecordTTL is how long a budget counter untouched is kept: a
// little longer than the longest budget window.
const BudgetRecordTTL = 31 * 24 * time.Hour

// CallHeaderAllowance is the room left in a call message for its headers
// beyond Config.MaxPayload of data.
const CallHeaderAllowance = 16 << 10

// SubjectCallWaits is where the calls stream keeps the calls waiting out
// their agent's bounds (fair share): each a one-time message schedule
// (CallWaitSubject) whose target is the call's own subject, fired by the
// server into the queue when its time comes. No consumer filters it, so
// a waiting call holds no slot of the workers consumer's MaxAckPending.
// Only workers publish on it; agents' calls reach the stream through the
// intake, which forwards only toolgate.call.<agent>.<tool>.
const SubjectCallWaits = events.Prefix + ".call_wait.>"

// CallWaitSubject is the schedule subject of the call waiting out its
// agent's bounds that had sequence seq in the calls stream: one per
// stored call, so that the schedule's roll-up (the server keeps one
// schedule per subject) never replaces another call's.
func CallWaitSubject(agent string, seq uint64) string {
	return events.Prefix + ".call_wait." + agent + "." + strconv.FormatUint(seq, 10)
}

// CallsOf is the subject filter of agent's calls in the calls stream:
// queued (toolgate.call.<agent>.<tool>) and waiting out their agent's
// bounds (CallWaitSubject).
func CallsOf(agent string) string { return events.Prefix + ".*." + agent + ".>" }

// Subjects of the dead-letter stream.
const SubjectDeadLetter = events.Prefix + ".dlq.>"

// SubjectMaxDeliveries is where the server announces a call delivered
// MaxDeliver times without an ack. The announcement is a core NATS message
// sent once; the advisories stream keeps it, so that it is not missed when
// no worker is connected at that moment.
const SubjectMaxDeliveries = "$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES." + StreamCalls + "." + ConsumerWorkers

// Config tunes what Provision creates. The zero value is the default.
type Config struct {
	// Replicas for streams and buckets (1 for a single server, 3 for a cluster).
	Replicas int
	// ResultsMaxAge is how long results are kept; default 24h.
	ResultsMaxAge time.Duration
	// EventsMaxAge is how long domain events are kept; default 7 days.
	EventsMaxAge time.Duration
	// AuditMaxAge is how long audit events are kept; default 30 days.
	AuditMaxAge time.Duration
	// CallRecordTTL is how long a call's idempotency record is kept; default 24h.
	CallRecordTTL time.Duration
	// AckWait is the workers consumer's ack wait; default 30s.
	AckWait time.Duration
	// MaxDeliver bounds redeliveries of one call; default 5.
	MaxDeliver int
	// MaxPayload bounds a call's data in bytes; default 1 MiB. The calls
	// stream refuses a message larger than MaxPayload plus
	// CallHeaderAllowance (its CloudEvents and trace headers), so an
	// oversized call is refused when it is published, not stored.
	MaxPayload int32
	// Storage is file (default) or memory.
	Storage jetstream.StorageType
	// CacheMaxAge is how long the result cache bucket keeps an entry;
	// default one hour.
	CacheMaxAge time.Duration
}

func (c Config) withDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	if c.Replicas <= 0 {
		c.Replicas = 1
	}
	def(&c.ResultsMaxAge, 24*time.Hour)
	def(&c.EventsMaxAge, 7*24*time.Hour)
	def(&c.AuditMaxAge, 30*24*time.Hour)
	def(&c.CallRecordTTL, 24*time.Hour)
	def(&c.AckWait, 30*time.Second)
	if c.MaxDeliver <= 0 {
		c.MaxDeliver = 5
	}
	if c.MaxPayload <= 0 {
		c.MaxPayload = 1 << 20
	}
	return c
}

// maxCallMsg is the calls stream's largest message: MaxPayload of data
// plus the header allowance.
func (c Config) maxCallMsg() int32 {
	return int32(min(int64(c.MaxPayload)+CallHeaderAllowance, math.MaxInt32))
}

// Streams returns the stream configurations Provision applies.
func (c Config) Streams() []jetstream.StreamConfig {
	c = c.withDefaults()
	return []jetstream.StreamConfig{
		{
			Name: StreamCalls, Subjects: []string{events.SubjectCalls, SubjectCallWaits},
			Retention: jetstream.WorkQueuePolicy, Storage: c.Storage, Replicas: c.Replicas,
			Duplicates: 2 * time.Minute, MaxMsgSize: c.maxCallMsg(), Discard: jetstream.DiscardOld,
			Description: "tool calls, one durable consumer shared by all workers",
			// Calls over their agent's bounds wait as message schedules
			// (SubjectCallWaits). The server requires roll-ups with them:
			// the intake refuses every Nats-* header of the agents' but
			// Nats-Msg-Id, so none but the workers' own reach the stream.
			AllowMsgSchedules: true, AllowRollup: true,
		},
		{
			Name: StreamResults, Subjects: []string{events.SubjectResults},
			Retention: jetstream.LimitsPolicy, Storage: c.Storage, Replicas: c.Replicas,
			MaxAge: c.ResultsMaxAge, Duplicates: 2 * time.Minute, AllowDirect: true,
			Description: "call results, kept so an agent can fetch one it missed",
		},
		{
			Name: StreamEvents, Subjects: []string{events.SubjectEvents},
			Retention: jetstream.LimitsPolicy, Storage: c.Storage, Replicas: c.Replicas,
			MaxAge: c.EventsMaxAge, Description: "domain events: registry changes, policy violations and changes",
		},
		{
			Name: StreamAudit, Subjects: []string{events.SubjectAudit},
			Retention: jetstream.LimitsPolicy, Storage: c.Storage, Replicas: c.Replicas,
			MaxAge: c.AuditMaxAge, Duplicates: 2 * time.Minute, Description: "one audit event per finished call",
		},
		{
			Name: StreamApprovals, Subjects: []string{events.SubjectApprovals},
			Retention: jetstream.LimitsPolicy, Storage: c.Storage, Replicas: c.Replicas,
			MaxAge: c.EventsMaxAge, Duplicates: 2 * time.Minute, Description: "approval requests and decisions",
		},
		{
			Name: StreamDeadLetter, Subjects: []string{SubjectDeadLetter},
			Retention: jetstream.LimitsPolicy, Storage: c.Storage, Replicas: c.Replicas,
			MaxAge: c.EventsMaxAge, Description: "calls that exhausted their deliveries",
		},
		{
			Name: StreamAdvisories, Subjects: []string{SubjectMaxDeliveries},
			Retention: jetstream.WorkQueuePolicy, Storage: c.Storage, Replicas: c.Replicas,
			MaxAge: c.EventsMaxAge, Description: "max-deliveries advisories of the workers consumer, until dead-lettered",
		},
		{
			Name: StreamTasks, Subjects: []string{events.SubjectTasks},
			Retention: jetstream.WorkQueuePolicy, Storage: c.Storage, Replicas: c.Replicas,
			MaxAge: c.ResultsMaxAge, Duplicates: 2 * time.Minute,
			Description: "delegated tasks, one consumer per target agent",
		},
		{
			Name: StreamTaskResults, Subjects: []string{events.SubjectTaskResults},
			Retention: jetstream.LimitsPolicy, Storage: c.Storage, Replicas: c.Replicas,
			MaxAge: c.ResultsMaxAge, Duplicates: 2 * time.Minute, AllowDirect: true,
			Description: "answers to delegated tasks",
		},
	}
}

// CacheTTL is the result cache bucket's TTL: Config.CacheMaxAge, default
// one hour. A worker's own cache TTL (shorter) is checked on every hit;
// the bucket's only bounds what is kept.
func (c Config) CacheTTL() time.Duration {
	if c.CacheMaxAge > 0 {
		return c.CacheMaxAge
	}
	return time.Hour
}

// TaskConsumer is the durable consumer of the tasks delegated to agent:
// named task_<agent>, filtered to toolgate.task.<agent>.>. The workers
// create it, when delegating and when the agent asks for its next task
// (agents use no JetStream API). Idle for TaskConsumerIdle, the server
// removes it; the tasks wait in the stream for the next one.
func TaskConsumer(agent string) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:           TaskConsumerName(agent),
		Description:       "tasks delegated to " + agent,
		AckPolicy:         jetstream.AckExplicitPolicy,
		AckWait:           time.Minute,
		MaxDeliver:        5,
		FilterSubject:     events.TasksOf(agent),
		InactiveThreshold: TaskConsumerIdle,
	}
}

// TaskConsumerIdle is how long a task consumer nobody asks lives on.
const TaskConsumerIdle = 15 * time.Minute

// TaskConsumerName is the name of agent's task consumer.
func TaskConsumerName(agent string) string { return "task_" + agent }

// WorkersConsumer returns the configuration of the shared call consumer.
func (c Config) WorkersConsumer() jetstream.ConsumerConfig {
	c = c.withDefaults()
	return jetstream.ConsumerConfig{
		Durable:       ConsumerWorkers,
		Description:   "shared by every worker; each call runs on one of them",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    c.MaxDeliver,
		BackOff:       nil,
		MaxAckPending: 4096,
		FilterSubject: events.SubjectCalls,
	}
}

// DeadLettersConsumer returns the configuration of the shared consumer of
// max-deliveries advisories. An advisory is acked once its call is in the
// dead-letter stream and gone from the work queue; until then it is
// delivered again.
func DeadLettersConsumer() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       ConsumerDeadLetters,
		Description:   "shared by every worker; moves calls that exhausted their deliveries to the dead-letter stream",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       30 * time.Second,
		FilterSubject: SubjectMaxDeliveries,
	}
}

// Provision creates or updates every stream, the workers consumer and the
// buckets. Running it again with the same Config changes nothing: it
// reads what exists, all at once, and creates or updates only what is
// missing or differs, so that a worker restarting on a healthy cluster
// sends no update through the cluster's consensus. Each request gets
// provisionAttempt of its own, not a share of the chain's.
func Provision(ctx context.Context, js jetstream.JetStream, c Config) error {
	c = c.withDefaults()
	buckets := c.buckets()
	var wg sync.WaitGroup
	errs := make([]error, len(c.Streams())+len(buckets))
	for i, sc := range c.Streams() {
		wg.Go(func() {
			errs[i] = ensureStream(ctx, js, sc)
			if errs[i] != nil {
				return
			}
			// A stream's consumers follow it.
			switch sc.Name {
			case StreamCalls:
				errs[i] = ensureConsumer(ctx, js, StreamCalls, c.WorkersConsumer())
			case StreamAdvisories:
				errs[i] = ensureConsumer(ctx, js, StreamAdvisories, DeadLettersConsumer())
			}
		})
	}
	for i, kc := range buckets {
		wg.Go(func() { errs[len(c.Streams())+i] = ensureBucket(ctx, js, kc) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// buckets are the key-value buckets Provision applies.
func (c Config) buckets() []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{
		{Bucket: BucketCalls, Description: "call records: idempotency claim and stored result", TTL: c.CallRecordTTL, Storage: c.Storage, Replicas: c.Replicas, History: 1},
		{Bucket: BucketPolicy, Description: "shared policy document and amendments", Storage: c.Storage, Replicas: c.Replicas, History: 10},
		{Bucket: BucketApprovals, Description: "parked calls waiting for a decision", Storage: c.Storage, Replicas: c.Replicas, History: 5},
		{Bucket: BucketBudgets, Description: "budget usage: calls, execution time and running calls per counter", TTL: BudgetRecordTTL, Storage: c.Storage, Replicas: c.Replicas, History: 1},
		{Bucket: BucketCancels, Description: "cancelled call ids, checked before a call runs", TTL: c.CallRecordTTL, Storage: c.Storage, Replicas: c.Replicas, History: 1},
		{Bucket: BucketTasks, Description: "delegated tasks: origin, allowed tools, what their calls did", TTL: c.CallRecordTTL, Storage: c.Storage, Replicas: c.Replicas, History: 1},
		{Bucket: BucketCache, Description: "cached results of read-only tools and workspace generations", TTL: c.CacheTTL(), Storage: c.Storage, Replicas: c.Replicas, History: 1},
	}
}

// request runs one JetStream API request with its own timeout (when ctx
// has none shorter).
func request[T any](ctx context.Context, fn func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, provisionAttempt)
	defer cancel()
	return fn(ctx)
}

// Recreate creates the stream name of c's streams when it does not exist
// (deleted while workers run), and reports whether it did. A stream that
// exists is left as it is, answering or not.
func Recreate(ctx context.Context, js jetstream.JetStream, c Config, name string) (bool, error) {
	for _, sc := range c.withDefaults().Streams() {
		if sc.Name != name {
			continue
		}
		if _, err := js.Stream(ctx, name); !errors.Is(err, jetstream.ErrStreamNotFound) {
			return false, nil
		}
		_, err := js.CreateStream(ctx, sc)
		if refusedSchedules(sc, err) {
			_, err = js.CreateStream(ctx, withoutSchedules(sc))
		}
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			return false, nil // another worker was quicker
		}
		if err != nil {
			return false, fmt.Errorf("recreate stream %s: %w", name, err)
		}
		return true, nil
	}
	return false, fmt.Errorf("recreate stream %s: no such stream", name)
}

// ensureStream creates sc, or updates it when what exists differs.
// A calls stream the server refuses message schedules (a server or
// cluster that does not know them, or refuses the update) is provisioned
// without them, as before: the workers then send calls over their
// agent's bounds back with a delayed nak (Schedules reports which).
func ensureStream(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	err := ensureStreamConfig(ctx, js, sc)
	if refusedSchedules(sc, err) && ensureStreamConfig(ctx, js, withoutSchedules(sc)) == nil {
		return nil
	}
	return err
}

// refusedSchedules reports whether err is the server's refusal of sc,
// which keeps message schedules: an answer of the server's that waiting
// does not cure.
func refusedSchedules(sc jetstream.StreamConfig, err error) bool {
	var api *jetstream.APIError
	return sc.AllowMsgSchedules && errors.As(err, &api) && !Transient(err)
}

// withoutSchedules is sc as it was before message schedules: no
// schedules, no roll-ups, no SubjectCallWaits.
func withoutSchedules(sc jetstream.StreamConfig) jetstream.StreamConfig {
	sc.AllowMsgSchedules, sc.AllowRollup = false, false
	sc.Subjects = slices.DeleteFunc(slices.Clone(sc.Subjects), func(s string) bool { return s == SubjectCallWaits })
	return sc
}

func ensureStreamConfig(ctx context.Context, js jetstream.JetStream, sc jetstream.StreamConfig) error {
	st, err := request(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, sc.Name) })
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = request(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.CreateStream(ctx, sc) })
		if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			// Another worker created it meanwhile, perhaps otherwise.
			_, err = request(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.CreateOrUpdateStream(ctx, sc) })
		}
	case err == nil && streamDiffers(sc, st.CachedInfo().Config):
		_, err = request(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.UpdateStream(ctx, sc) })
	}
	if err != nil {
		return fmt.Errorf("provision stream %s: %w", sc.Name, err)
	}
	return nil
}

// streamDiffers reports whether the stream got lacks a setting of want.
// A zero setting of want is the server's default, whatever it is.
func streamDiffers(want, got jetstream.StreamConfig) bool {
	return !slices.Equal(want.Subjects, got.Subjects) || want.Retention != got.Retention || want.Storage != got.Storage ||
		want.Description != got.Description || want.Discard != got.Discard || want.AllowDirect != got.AllowDirect ||
		differs(want.Replicas, got.Replicas) || differs(want.Duplicates, got.Duplicates) ||
		differs(want.MaxMsgSize, got.MaxMsgSize) || differs(want.MaxAge, got.MaxAge) ||
		want.AllowMsgSchedules && !got.AllowMsgSchedules
}

// Schedules reports whether the calls stream st describes keeps calls
// waiting out their agent's bounds as message schedules: it allows them
// and holds SubjectCallWaits. A stream provisioned without them (a
// server that refused them) does not, and a schedule published to it
// would never fire: the workers send such calls back with a delayed nak
// instead.
func Schedules(st jetstream.StreamConfig) bool {
	return st.AllowMsgSchedules && slices.Contains(st.Subjects, SubjectCallWaits)
}

// differs reports whether a setting differs from the one wanted, zero
// wanting the server's default.
func differs[T comparable](want, got T) bool {
	var zero T
	return want != zero && want != got
}

// ensureConsumer creates cc on stream, or updates it when what exists
// differs.
func ensureConsumer(ctx context.Context, js jetstream.JetStream, stream string, cc jetstream.ConsumerConfig) error {
	cons, err := request(ctx, func(ctx context.Context) (jetstream.Consumer, error) { return js.Consumer(ctx, stream, cc.Durable) })
	if err == nil {
		got := cons.CachedInfo().Config
		if got.Description == cc.Description && got.AckPolicy == cc.AckPolicy && got.AckWait == cc.AckWait &&
			!differs(cc.MaxDeliver, got.MaxDeliver) && !differs(cc.MaxAckPending, got.MaxAckPending) &&
			got.FilterSubject == cc.FilterSubject && slices.Equal(got.BackOff, cc.BackOff) {
			return nil
		}
	}
	if err == nil || errors.Is(err, jetstream.ErrConsumerNotFound) {
		_, err = request(ctx, func(ctx context.Context) (jetstream.Consumer, error) {
			return js.CreateOrUpdateConsumer(ctx, stream, cc)
		})
	}
	if err != nil {
		return fmt.Errorf("provision consumer %s: %w", cc.Durable, err)
	}
	return nil
}

// ensureBucket creates kc, or updates it when its stream differs.
func ensureBucket(ctx context.Context, js jetstream.JetStream, kc jetstream.KeyValueConfig) error {
	st, err := request(ctx, func(ctx context.Context) (jetstream.Stream, error) { return js.Stream(ctx, "KV_"+kc.Bucket) })
	if err == nil {
		got := st.CachedInfo().Config
		if got.Description == kc.Description && got.Storage == kc.Storage && got.MaxMsgsPerSubject == int64(max(kc.History, 1)) &&
			got.MaxAge == kc.TTL && !differs(kc.Replicas, got.Replicas) {
			return nil
		}
	}
	switch {
	case err == nil:
		_, err = request(ctx, func(ctx context.Context) (jetstream.KeyValue, error) { return js.UpdateKeyValue(ctx, kc) })
	case errors.Is(err, jetstream.ErrStreamNotFound):
		_, err = request(ctx, func(ctx context.Context) (jetstream.KeyValue, error) { return js.CreateKeyValue(ctx, kc) })
		if errors.Is(err, jetstream.ErrBucketExists) {
			// Another worker created it meanwhile, perhaps otherwise.
			_, err = request(ctx, func(ctx context.Context) (jetstream.KeyValue, error) { return js.CreateOrUpdateKeyValue(ctx, kc) })
		}
	}
	if err != nil {
		return fmt.Errorf("provision bucket %s: %w", kc.Bucket, err)
	}
	return nil
}

// IsNotFound reports whether err says a stream, consumer or key is missing.
func IsNotFound(err error) bool {
	return errors.Is(err, jetstream.ErrStreamNotFound) || errors.Is(err, jetstream.ErrConsumerNotFound) ||
		errors.Is(err, jetstream.ErrKeyNotFound)
}

// Bounds of Provision and ProvisionWait: provisionAttempt bounds one
// JetStream API request, the gaps the backoff between attempts.
const (
	provisionAttempt  = 10 * time.Second
	provisionFirstGap = 250 * time.Millisecond
	provisionMaxGap   = 10 * time.Second
)

// ProvisionWait runs Provision until it succeeds, retrying with backoff
// while JetStream is not ready yet (a cluster still forming, electing its
// meta leader, or short of the peers Replicas needs), and logging what it
// waits for. It gives up on errors waiting cannot cure (a permissions
// violation, a conflicting stream) and when ctx ends.
func ProvisionWait(ctx context.Context, js jetstream.JetStream, c Config, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	gap := provisionFirstGap
	for attempt := 1; ; attempt++ {
		err := Provision(ctx, js, c)
		if err == nil {
			if attempt > 1 {
				log.Info("bus provisioned", "attempts", attempt)
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (stopped waiting: %w)", err, ctx.Err())
		}
		if !Transient(err) {
			return err
		}
		log.Warn("waiting for JetStream to provision the bus", "waiting_for", waitingFor(err, c.withDefaults().Replicas),
			"attempt", attempt, "retry_in", gap, "err", err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (stopped waiting: %w)", err, ctx.Err())
		case <-time.After(gap):
		}
		gap = min(2*gap, provisionMaxGap)
	}
}

// Transient reports whether a JetStream API error may go away by waiting:
// no answer (yet), JetStream not up, the cluster without a leader or
// short of peers.
func Transient(err error) bool {
	if errors.Is(err, nats.ErrPermissionViolation) || errors.Is(err, nats.ErrAuthorization) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled) || errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected) {
		return true
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode {
		case 10008, // JetStream system temporarily unavailable
			10005, // no suitable peers for placement
			10023, // insufficient resources
			10074: // cluster not assigned / no leader yet
			return true
		}
		return api.Code == 503
	}
	return false
}

func waitingFor(err error, replicas int) string {
	var api *jetstream.APIError
	switch {
	case errors.As(err, &api) && (api.ErrorCode == 10005 || api.ErrorCode == 10023):
		return fmt.Sprintf("%d JetStream peers with room for %d replicas", replicas, replicas)
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrJetStreamNotEnabled):
		return "JetStream to be enabled on the server"
	default:
		return "the JetStream cluster to elect a leader and answer"
	}
}

// WaitProvisioned waits until the named streams exist (a worker
// provisions them), for services whose credentials may read the bus but
// not create it. It logs what it waits for and gives up when ctx ends.
func WaitProvisioned(ctx context.Context, js jetstream.JetStream, log *slog.Logger, streams ...string) error {
	if log == nil {
		log = slog.Default()
	}
	gap := provisionFirstGap
	for _, name := range streams {
		for attempt := 1; ; attempt++ {
			actx, cancel := context.WithTimeout(ctx, provisionAttempt)
			_, err := js.Stream(actx, name)
			cancel()
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return fmt.Errorf("stream %s: %w (stopped waiting: %w)", name, err, ctx.Err())
			}
			if !errors.Is(err, jetstream.ErrStreamNotFound) && !Transient(err) {
				return fmt.Errorf("stream %s: %w", name, err)
			}
			log.Warn("waiting for a worker to provision the bus", "stream", name, "attempt", attempt, "retry_in", gap, "err", err)
			select {
			case <-ctx.Done():
				return fmt.Errorf("stream %s: %w (stopped waiting: %w)", name, err, ctx.Err())
			case <-time.After(gap):
			}
			gap = min(2*gap, provisionMaxGap)
		}
	}
	return nil
}
