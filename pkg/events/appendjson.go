package events

import (
	"encoding/json"
	"math/bits"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"
)

// The JSON of the two payloads every call makes (its result and its
// execution audit event), written without reflection: the bytes
// encoding/json.Marshal writes for the same value, built field by field
// into one buffer. A value it cannot write exactly as Marshal would (a
// metadata value of another type than string, bool, int or int64; a
// time Marshal refuses or writes with an offset; an approval's edited
// arguments, which Marshal compacts) makes it say so, and the caller
// marshals the value the general way. The tests hold the two to the
// same bytes (TestAppendJSONMatchesMarshal, FuzzAppendJSON).

// marshalData is json.Marshal(data), without reflection for the
// payloads appendResult and appendAudit write.
func marshalData(data any) ([]byte, error) {
	var (
		b  []byte
		ok bool
	)
	switch d := data.(type) {
	case ResultData:
		b, ok = appendResult(make([]byte, 0, resultSize(&d)), &d)
	case *ResultData:
		if d != nil {
			b, ok = appendResult(make([]byte, 0, resultSize(d)), d)
		}
	case AuditData:
		b, ok = appendAudit(make([]byte, 0, auditSize), &d)
	case *AuditData:
		if d != nil {
			b, ok = appendAudit(make([]byte, 0, auditSize), d)
		}
	}
	if ok {
		return b, nil
	}
	return json.Marshal(data)
}

// auditSize is about the length of an audit event's JSON.
const auditSize = 768

// resultSize is about the length of r's JSON.
func resultSize(r *ResultData) int {
	return 256 + len(r.Output) + len(r.Output)/16 + 48*len(r.Metadata)
}

// appendResult appends the JSON of r; false when it cannot write r
// exactly as json.Marshal would.
func appendResult(b []byte, r *ResultData) ([]byte, bool) {
	b = append(b, `{"call_id":`...)
	b = appendString(b, r.CallID)
	b = append(b, `,"agent":`...)
	b = appendString(b, r.Agent)
	b = append(b, `,"tool":`...)
	b = appendString(b, r.Tool)
	b = appendOptString(b, `,"session_id":`, r.SessionID)
	b = append(b, `,"status":`...)
	b = appendString(b, string(r.Status))
	b = append(b, `,"output":`...)
	b = appendString(b, r.Output)
	b = append(b, `,"is_error":`...)
	b = strconv.AppendBool(b, r.IsError)
	if len(r.Metadata) > 0 {
		var ok bool
		b = append(b, `,"metadata":`...)
		if b, ok = appendMetadata(b, r.Metadata); !ok {
			return b, false
		}
	}
	if r.Decision != nil {
		b = append(b, `,"decision":`...)
		b = appendDecision(b, r.Decision)
	}
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendInt(b, r.DurationMS, 10)
	b = appendOptString(b, `,"error":`, r.Error)
	b = appendOptString(b, `,"parent_call_id":`, r.ParentCallID)
	if r.Cached {
		b = append(b, `,"cached":true`...)
	}
	b = appendHooks(b, r.Hooks)
	return append(b, '}'), true
}

// appendAudit appends the JSON of a; false when it cannot write a
// exactly as json.Marshal would.
func appendAudit(b []byte, a *AuditData) ([]byte, bool) {
	var ok bool
	b = append(b, '{')
	if a.Kind != "" {
		b = append(b, `"kind":`...)
		b = appendString(b, a.Kind)
		b = append(b, ',')
	}
	b = append(b, `"call_id":`...)
	b = appendString(b, a.CallID)
	b = append(b, `,"agent":`...)
	b = appendString(b, a.Agent)
	b = append(b, `,"tool":`...)
	b = appendString(b, a.Tool)
	b = appendOptString(b, `,"session_id":`, a.SessionID)
	b = append(b, `,"status":`...)
	b = appendString(b, string(a.Status))
	b = append(b, `,"is_error":`...)
	b = strconv.AppendBool(b, a.IsError)
	if a.Decision != nil {
		b = append(b, `,"decision":`...)
		b = appendDecision(b, a.Decision)
	}
	b = append(b, `,"duration_ms":`...)
	b = strconv.AppendInt(b, a.DurationMS, 10)
	b = append(b, `,"args_sha256":`...)
	b = appendString(b, a.ArgsSHA256)
	b = append(b, `,"output_bytes":`...)
	b = strconv.AppendInt(b, int64(a.OutputBytes), 10)
	b = append(b, `,"worker":`...)
	b = appendString(b, a.Worker)
	b = appendOptString(b, `,"error":`, a.Error)
	b = append(b, `,"time":`...)
	if b, ok = appendTime(b, a.Time); !ok {
		return b, false
	}
	if a.Approval != nil {
		b = append(b, `,"approval":`...)
		if b, ok = appendApproval(b, a.Approval); !ok {
			return b, false
		}
	}
	if len(a.DecidedBy) > 0 {
		b = append(b, `,"decided_by":`...)
		b = appendStrings(b, a.DecidedBy)
	}
	if !a.DecidedAt.IsZero() {
		b = append(b, `,"decided_at":`...)
		if b, ok = appendTime(b, a.DecidedAt); !ok {
			return b, false
		}
	}
	b = appendOptString(b, `,"result_sha256":`, a.ResultSHA256)
	if a.Resumed {
		b = append(b, `,"resumed":true`...)
	}
	if a.JudgeOnly {
		b = append(b, `,"judge_only":true`...)
	}
	b = appendOptString(b, `,"parent_call_id":`, a.ParentCallID)
	if a.Cached {
		b = append(b, `,"cached":true`...)
	}
	b = appendHooks(b, a.Hooks)
	if a.Judged != nil {
		b = append(b, `,"judged":`...)
		b = appendJudged(b, a.Judged)
	}
	if a.Confinement != nil {
		b = append(b, `,"confinement":{`...)
		n := len(b)
		if a.Confinement.Exec != "" {
			b = append(b, `"exec":`...)
			b = appendString(b, a.Confinement.Exec)
		}
		if a.Confinement.Write != "" {
			if len(b) > n {
				b = append(b, ',')
			}
			b = append(b, `"write":`...)
			b = appendString(b, a.Confinement.Write)
		}
		b = append(b, '}')
	}
	b = appendOptString(b, `,"trace_id":`, a.TraceID)
	b = appendOptString(b, `,"span_id":`, a.SpanID)
	b = appendOptString(b, `,"chain":`, a.Chain)
	if a.Seq != 0 {
		b = append(b, `,"seq":`...)
		b = strconv.AppendUint(b, a.Seq, 10)
	}
	b = appendOptString(b, `,"prev":`, a.Prev)
	return append(b, '}'), true
}

func appendDecision(b []byte, d *Decision) []byte {
	b = append(b, `{"action":`...)
	b = appendString(b, d.Action)
	b = appendOptString(b, `,"reason":`, d.Reason)
	b = appendOptString(b, `,"rule":`, d.Rule)
	b = appendOptString(b, `,"offending":`, d.Offending)
	b = appendOptString(b, `,"revision":`, d.Revision)
	if len(d.Approvers) > 0 {
		b = append(b, `,"approvers":`...)
		b = appendStrings(b, d.Approvers)
	}
	return append(b, '}')
}

func appendApproval(b []byte, a *ApprovalAudit) ([]byte, bool) {
	if len(a.EditedArguments) > 0 {
		return b, false // Marshal compacts and checks it
	}
	b = append(b, `{"outcome":`...)
	b = appendString(b, a.Outcome)
	if len(a.Approvers) > 0 {
		b = append(b, `,"approvers":`...)
		b = appendStrings(b, a.Approvers)
	}
	b = appendOptString(b, `,"comment":`, a.Comment)
	b = append(b, `,"decided_at":`...)
	var ok bool
	if b, ok = appendTime(b, a.DecidedAt); !ok {
		return b, false
	}
	b = appendOptString(b, `,"original_args_sha256":`, a.OriginalArgsSHA256)
	b = appendOptString(b, `,"edited_args_sha256":`, a.EditedArgsSHA256)
	return append(b, '}'), true
}

func appendHooks(b []byte, hs []HookChange) []byte {
	if len(hs) == 0 {
		return b
	}
	b = append(b, `,"hooks":[`...)
	for i := range hs {
		h := &hs[i]
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"hook":`...)
		b = appendString(b, h.Hook)
		b = append(b, `,"stage":`...)
		b = appendString(b, h.Stage)
		b = appendOptString(b, `,"args_sha256_before":`, h.ArgsSHA256Before)
		b = appendOptString(b, `,"args_sha256_after":`, h.ArgsSHA256After)
		b = appendOptString(b, `,"output_sha256":`, h.OutputSHA256)
		b = appendOptString(b, `,"note":`, h.Note)
		b = append(b, '}')
	}
	return append(b, ']')
}

func appendJudged(b []byte, j *Judged) []byte {
	b = append(b, '{')
	n := len(b)
	field := func(name string) {
		if len(b) > n {
			b = append(b, ',')
		}
		b = append(b, name...)
	}
	str := func(name, v string) {
		if v != "" {
			field(name)
			b = appendString(b, v)
		}
	}
	str(`"ws":`, j.Workspace)
	str(`"kind":`, j.Kind)
	if j.Unknown {
		field(`"unknown":true`)
	}
	str(`"cmd":`, j.Command)
	str(`"cwd":`, j.Workdir)
	str(`"path":`, j.Path)
	str(`"pattern":`, j.Pattern)
	if len(j.Hosts) > 0 {
		field(`"hosts":`)
		b = appendStrings(b, j.Hosts)
	}
	if len(j.Links) > 0 {
		field(`"links":{`)
		keys := make([]string, 0, len(j.Links))
		for k := range j.Links {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
			b = append(b, ':')
			b = appendString(b, j.Links[k])
		}
		b = append(b, '}')
	}
	if j.Redacted {
		field(`"redacted":true`)
	}
	return append(b, '}')
}

// appendMetadata appends a result's metadata: an object of its keys in
// order, its values strings, booleans, ints or int64s; false for another
// value.
func appendMetadata(b []byte, md map[string]any) ([]byte, bool) {
	var buf [16]string
	keys := buf[:0]
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		switch v := md[k].(type) {
		case string:
			b = appendString(b, v)
		case bool:
			b = strconv.AppendBool(b, v)
		case int:
			b = strconv.AppendInt(b, int64(v), 10)
		case int64:
			b = strconv.AppendInt(b, v, 10)
		default:
			return b, false
		}
	}
	return append(b, '}'), true
}

func appendStrings(b []byte, ss []string) []byte {
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, s)
	}
	return append(b, ']')
}

// appendTime appends t as time.Time's MarshalJSON does, for a UTC time
// of the years 0 to 9999; false for another.
func appendTime(b []byte, t time.Time) ([]byte, bool) {
	if _, off := t.Zone(); off != 0 || t.Year() < 0 || t.Year() > 9999 {
		return b, false
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), true
}

func appendOptString(b []byte, name, s string) []byte {
	if s == "" {
		return b
	}
	b = append(b, name...)
	return appendString(b, s)
}

// appendString appends s as a JSON string exactly as encoding/json does
// (HTML-safe: <, > and & escaped; invalid UTF-8 as U+FFFD; U+2028 and
// U+2029 escaped).
func appendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if i+8 <= len(s) {
			if n := safeBytes(s, i); n > 0 {
				i += n // bytes written as they are
				continue
			}
		}
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// safeBytes is how many of the eight bytes of s from i need no escaping,
// counted from i up to the first that may: a control byte, a byte of a
// multi-byte rune, a quote, a backslash, <, > or &. (The first flagged
// byte is exact: a borrow across bytes only flags bytes above a true
// one.)
func safeBytes(s string, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	w := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
		uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
	t := w | (w - 0x20*ones) // the high bit: a byte >= 0x80, or < 0x20
	x := w ^ ('"' * ones)    // a zero byte where a quote is
	t |= (x - ones) &^ x
	x = w ^ ('\\' * ones)
	t |= (x - ones) &^ x
	x = w ^ ('<' * ones)
	t |= (x - ones) &^ x
	x = w ^ ('>' * ones)
	t |= (x - ones) &^ x
	x = w ^ ('&' * ones)
	t |= (x - ones) &^ x
	return bits.TrailingZeros64(t&highs) / 8
}
