package telemetry

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/propagation"
)

// cePrefix is how the CloudEvents distributed-tracing extension's
// attributes (traceparent, tracestate) travel as NATS headers in binary
// mode: ce-traceparent, ce-tracestate.
const cePrefix = "ce-"

// HeaderCarrier carries trace context in a NATS message's CloudEvents
// headers. NATS headers are case-sensitive and publishers spell them as
// they like (ce-traceparent, Ce-Traceparent, CE-TRACEPARENT), so Get finds
// a key in any case; Set writes the lower-case form the codec writes.
type HeaderCarrier nats.Header

var _ propagation.TextMapCarrier = HeaderCarrier{}

// Get returns the value of the extension attribute key (traceparent, ...).
func (c HeaderCarrier) Get(key string) string {
	want := cePrefix + key
	if v := nats.Header(c).Get(want); v != "" {
		return v
	}
	for k, vs := range c {
		if len(vs) > 0 && strings.EqualFold(k, want) {
			return vs[0]
		}
	}
	return ""
}

// Set sets the extension attribute key.
func (c HeaderCarrier) Set(key, value string) {
	want := cePrefix + key
	for k := range c {
		if strings.EqualFold(k, want) && k != want {
			delete(c, k)
		}
	}
	nats.Header(c).Set(want, value)
}

// Keys lists the extension attributes present.
func (c HeaderCarrier) Keys() []string {
	var out []string
	for k := range c {
		if len(k) > len(cePrefix) && strings.EqualFold(k[:len(cePrefix)], cePrefix) {
			out = append(out, strings.ToLower(k[len(cePrefix):]))
		}
	}
	return out
}

// Extract returns ctx with the remote span context of traceparent and
// tracestate (as decoded from a call in any content mode), if valid.
func (t *Telemetry) Extract(ctx context.Context, traceparent, tracestate string) context.Context {
	if traceparent == "" {
		return ctx
	}
	c := propagation.MapCarrier{"traceparent": traceparent}
	if tracestate != "" {
		c["tracestate"] = tracestate
	}
	return t.OrDisabled().Propagator.Extract(ctx, c)
}

// Inject returns the traceparent and tracestate of ctx's span, empty when
// it has none.
func (t *Telemetry) Inject(ctx context.Context) (traceparent, tracestate string) {
	c := propagation.MapCarrier{}
	t.OrDisabled().Propagator.Inject(ctx, c)
	return c["traceparent"], c["tracestate"]
}

// InjectHeader writes ctx's trace context into h as ce-traceparent and
// ce-tracestate.
func (t *Telemetry) InjectHeader(ctx context.Context, h nats.Header) {
	t.OrDisabled().Propagator.Inject(ctx, HeaderCarrier(h))
}

// ExtractHeader reads trace context from h's CloudEvents headers.
func (t *Telemetry) ExtractHeader(ctx context.Context, h nats.Header) context.Context {
	return t.OrDisabled().Propagator.Extract(ctx, HeaderCarrier(h))
}

// MetaSpan is the key under which a parked call's record keeps the W3C
// traceparent of the span that parked it: the approver's decision span
// and the resumed execution continue that trace.
const MetaSpan = "span_traceparent"

// TraceParentOf is the W3C traceparent of ctx's span, empty when it has
// none. It is used where trace context is stored rather than sent, so it
// does not depend on the configured propagators.
func TraceParentOf(ctx context.Context) string {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	return c["traceparent"]
}
