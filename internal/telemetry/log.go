package telemetry

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/trace"
)

// Log attribute keys stamped on lines about a call.
const (
	LogCallID  = "call_id"
	LogTraceID = "trace_id"
	LogSpanID  = "span_id"
)

// NewLogger returns a logger writing format ("text" or "json") to w whose
// lines about a call carry trace_id and span_id, and whose attributes
// named like secrets are redacted.
func NewLogger(format string, w io.Writer) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{ReplaceAttr: redact}
	var h slog.Handler
	switch format {
	case "", "text":
		h = slog.NewTextHandler(w, opts)
	case "json":
		h = slog.NewJSONHandler(w, opts)
	default:
		return nil, fmt.Errorf("log format %q: want text or json", format)
	}
	return slog.New(NewLogHandler(h)), nil
}

// secretKeys are attribute names whose values never reach a log.
var secretKeys = []string{"token", "password", "passwd", "secret", "authorization", "cookie", "seed", "nkey", "creds", "credential", "arguments", "private"}

func redact(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		// 30s, not 30000000000: the JSON handler writes nanoseconds.
		return slog.String(a.Key, a.Value.Duration().String())
	}
	k := strings.ToLower(a.Key)
	for _, s := range secretKeys {
		if strings.Contains(k, s) {
			return slog.String(a.Key, "[redacted]")
		}
	}
	return a
}

// calls maps the call ids being handled to their span, so that a line
// that names a call_id but was logged without a context still gets the
// call's trace ids.
var calls sync.Map // call id → *trace.SpanContext

// Track records sc as the span of callID for log lines until the returned
// function is called. Invalid span contexts are not tracked.
func Track(callID string, sc trace.SpanContext) (untrack func()) {
	if !sc.IsValid() || callID == "" {
		return func() {}
	}
	p := &sc // SpanContext is not comparable; the pointer is
	calls.Store(callID, p)
	return func() { calls.CompareAndDelete(callID, p) }
}

// NewLogHandler wraps h: a record logged with a context holding a span, or
// naming a call_id being handled, gets that span's trace_id and span_id.
func NewLogHandler(h slog.Handler) slog.Handler { return &logHandler{h: h} }

type logHandler struct {
	h      slog.Handler
	callID string // a call_id given through With
}

func (l *logHandler) Enabled(ctx context.Context, lv slog.Level) bool { return l.h.Enabled(ctx, lv) }

func (l *logHandler) Handle(ctx context.Context, r slog.Record) error {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		id := l.callID
		if id == "" {
			r.Attrs(func(a slog.Attr) bool {
				if a.Key == LogCallID {
					id = a.Value.String()
					return false
				}
				return true
			})
		}
		if id != "" {
			if v, ok := calls.Load(id); ok {
				sc = *v.(*trace.SpanContext)
			}
		}
	}
	if sc.IsValid() {
		r.AddAttrs(slog.String(LogTraceID, sc.TraceID().String()), slog.String(LogSpanID, sc.SpanID().String()))
	}
	return l.h.Handle(ctx, r)
}

func (l *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := &logHandler{h: l.h.WithAttrs(as), callID: l.callID}
	for _, a := range as {
		if a.Key == LogCallID {
			n.callID = a.Value.String()
		}
	}
	return n
}

func (l *logHandler) WithGroup(name string) slog.Handler {
	return &logHandler{h: l.h.WithGroup(name), callID: l.callID}
}

// Lines returns where a program writes its plain start-up lines
// ("toolgate: ..."): w itself for the text format; for json, a writer that
// logs each line through l as one record at info level, so that every
// line of the output is JSON.
func Lines(format string, w io.Writer, l *slog.Logger) io.Writer {
	if format != "json" {
		return w
	}
	return &lineLogger{l: l}
}

// lineLogger logs each complete line written to it.
type lineLogger struct {
	mu      sync.Mutex
	l       *slog.Logger
	partial []byte
}

func (w *lineLogger) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := strings.IndexByte(string(w.partial), '\n')
		if i < 0 {
			return len(p), nil
		}
		line := strings.TrimSpace(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
		if line == "" {
			continue
		}
		prog, msg, ok := strings.Cut(line, ": ")
		if !ok || strings.ContainsAny(prog, " \t") {
			prog, msg = "", line
		}
		if strings.HasPrefix(msg, "WARNING: ") {
			w.l.Warn(strings.TrimPrefix(msg, "WARNING: "))
		} else {
			w.l.Info(msg)
		}
	}
}
