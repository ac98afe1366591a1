package hooks

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
)

// RedactName is the name of the built-in redaction hook in configuration,
// results and audit records.
const RedactName = "redact"

// Marker is what a redacted secret is replaced with: [REDACTED:<kind>].
func Marker(kind string) string { return "[REDACTED:" + kind + "]" }

const markerPrefix = "[REDACTED:"

// pattern is one secret format. When group is set, only that submatch
// (the value after a key name) is replaced. The expression runs only on
// the lines holding one of its triggers (in lower case when fold is set;
// the whole text when multiline is set): most outputs hold none, and a
// scan for a few literals is far cheaper than the expression's. A pattern
// without triggers runs on the whole text.
type pattern struct {
	kind      string
	re        *regexp.Regexp
	group     int
	triggers  []string
	fold      bool
	multiline bool
}

// builtinPatterns are the common secret formats. Each is anchored on what
// makes it a secret (a vendor prefix, a key name before it, a PEM armour
// line), so that ordinary text is left alone. They are compiled when the
// first redactor is made, not by every process that links the package.
var builtinPatterns = sync.OnceValue(func() []pattern {
	return []pattern{
		// PEM private keys, also one cut short (no END line): everything from
		// the BEGIN line on.
		{kind: "private-key", re: regexp.MustCompile(`-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----(?s:.*?)(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\z)`),
			triggers: []string{"-----BEGIN "}, multiline: true},
		{kind: "jwt", re: regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`), triggers: []string{"eyJ"}},
		{kind: "nats-seed", re: regexp.MustCompile(`\bS[UAOCNXP][A-Z2-7]{56}\b`), triggers: []string{"SU", "SA", "SO", "SC", "SN", "SX", "SP"}},
		{kind: "aws-access-key-id", re: regexp.MustCompile(`\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|AROA|APKA|ASCA)[A-Z0-9]{16}\b`),
			triggers: []string{"AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AIPA", "ANPA", "ANVA", "AROA", "APKA", "ASCA"}},
		{kind: "aws-secret-access-key", re: regexp.MustCompile(`(?i)\baws_?secret(?:_?access)?_?key\b["']?\s*[:=]\s*["']?([A-Za-z0-9/+=]{40})\b`), group: 1,
			triggers: []string{"secret"}, fold: true},
		{kind: "github-token", re: regexp.MustCompile(`\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b`), triggers: []string{"ghp_", "gho_", "ghu_", "ghs_", "ghr_"}},
		{kind: "github-token", re: regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{22,255}\b`), triggers: []string{"github_pat_"}},
		{kind: "slack-token", re: regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}`), triggers: []string{"xox"}},
		{kind: "slack-token", re: regexp.MustCompile(`\bxapp-[0-9]-[A-Za-z0-9-]{10,}`), triggers: []string{"xapp-"}},
		{kind: "bearer-token", re: regexp.MustCompile(`(?i)\bBearer\s+([A-Za-z0-9._~+/=-]{16,})`), group: 1, triggers: []string{"bearer"}, fold: true},
		{kind: "url-password", re: regexp.MustCompile(`\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s:/@]+:([^\s/@]+)@`), group: 1, triggers: []string{"://"}},
		{kind: "api-key", re: regexp.MustCompile(`(?i)\b(?:api[_-]?key|apikey|api[_-]?secret|access[_-]?token|auth[_-]?token|secret[_-]?key|client[_-]?secret|private[_-]?key|password|passwd)\b["']?\s*[:=]\s*["']?([^\s"'&,;<>]{6,})`), group: 1,
			triggers: []string{"key", "secret", "token", "passw"}, fold: true},
	}
})

// Redactor replaces secrets in text with markers: literal secrets it is
// given (the worker's own credentials) and the common key formats. It is
// safe for concurrent use; redacting twice gives what redacting once
// gives.
type Redactor struct {
	literals []string // longest first
	patterns []pattern
}

// NewRedactor returns a redactor of the common formats plus the literal
// secrets given (empty and short ones, under 8 characters, are left out:
// they would redact ordinary words) and the extra patterns, kind →
// regular expression.
func NewRedactor(literals []string, extra map[string]string) (*Redactor, error) {
	r := &Redactor{patterns: slices.Clone(builtinPatterns())}
	for _, l := range literals {
		if len(l) >= 8 && !slices.Contains(r.literals, l) {
			r.literals = append(r.literals, l)
		}
	}
	sort.Slice(r.literals, func(i, j int) bool { return len(r.literals[i]) > len(r.literals[j]) })
	kinds := make([]string, 0, len(extra))
	for k := range extra {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		re, err := regexp.Compile(extra[k])
		if err != nil {
			return nil, fmt.Errorf("pattern %s: %w", k, err)
		}
		g := 0
		if re.NumSubexp() > 0 {
			g = 1
		}
		r.patterns = append(r.patterns, pattern{kind: k, re: re, group: g})
	}
	return r, nil
}

// Redact returns s with every secret replaced by its marker, and the
// kinds replaced (sorted, each once).
func (r *Redactor) Redact(s string) (string, []string) {
	var kinds []string
	for _, l := range r.literals {
		if strings.Contains(s, l) {
			s = strings.ReplaceAll(s, l, Marker("worker-credential"))
			kinds = append(kinds, "worker-credential")
		}
	}
	var low folded
	for i := range r.patterns {
		s = r.patterns[i].redact(s, &kinds, &low)
	}
	slices.Sort(kinds)
	return s, slices.Compact(kinds)
}

// redact replaces p's matches in s. The expression runs only on the lines
// that hold a trigger (on the whole text for a multi-line pattern).
func (p *pattern) redact(s string, kinds *[]string, low *folded) string {
	spans := p.windows(s, low)
	if len(spans) == 0 {
		return s
	}
	var locs [][]int
	for _, sp := range spans {
		for _, loc := range p.re.FindAllStringSubmatchIndex(s[sp[0]:sp[1]], -1) {
			for k := range loc {
				if loc[k] >= 0 {
					loc[k] += sp[0]
				}
			}
			locs = append(locs, loc)
		}
	}
	if len(locs) == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	for _, loc := range locs {
		from, to := loc[0], loc[1]
		if p.group > 0 {
			from, to = loc[2*p.group], loc[2*p.group+1]
			if from < 0 {
				continue
			}
		}
		if strings.HasPrefix(s[from:], markerPrefix) {
			continue // redacted already
		}
		b.WriteString(s[last:from])
		b.WriteString(Marker(p.kind))
		last = to
		*kinds = append(*kinds, p.kind)
	}
	b.WriteString(s[last:])
	return b.String()
}

// windows are the sorted, disjoint spans of s the expression must see.
// low lowers s for a case-folding pattern's triggers.
func (p *pattern) windows(s string, low *folded) [][2]int {
	if len(p.triggers) == 0 {
		return [][2]int{{0, len(s)}}
	}
	text := s
	if p.fold {
		text = low.of(s)
	}
	var spans [][2]int
	for _, t := range p.triggers {
		for off := 0; off < len(text); {
			i := strings.Index(text[off:], t)
			if i < 0 {
				break
			}
			if p.multiline {
				return [][2]int{{0, len(s)}}
			}
			at := off + i
			start := strings.LastIndexByte(s[:at], '\n') + 1
			end := len(s)
			if n := strings.IndexByte(s[at:], '\n'); n >= 0 {
				end = at + n
			}
			spans = append(spans, [2]int{start, end})
			off = end + 1
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	merged := spans[:0]
	for _, sp := range spans {
		if n := len(merged); n > 0 && sp[0] <= merged[n-1][1] {
			merged[n-1][1] = max(merged[n-1][1], sp[1])
			continue
		}
		merged = append(merged, sp)
	}
	return merged
}

// folded is the ASCII-lowered copy of the text a Redact call scans, made
// once for its case-folding patterns and again only when a pattern
// before them changed the text.
type folded struct {
	src, lower string
	ok         bool
}

func (f *folded) of(s string) string {
	if !f.ok || f.src != s {
		f.src, f.lower, f.ok = s, asciiLower(s), true
	}
	return f.lower
}

// asciiLower lowers ASCII letters only, so that offsets stay those of s.
// It returns s itself when s has no upper-case ASCII letter and makes one
// copy otherwise: for a clean output, that copy was most of what its
// redaction cost.
func asciiLower(s string) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; 'A' <= c && c <= 'Z' {
			if last == 0 {
				b.Grow(len(s))
			}
			b.WriteString(s[last:i])
			b.WriteByte(c + 'a' - 'A')
			last = i + 1
		}
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// Stream redacts a stream of chunks (a running tool's progress) and hands
// what is safe to send to emit. A secret split across two chunks is caught:
// only whole lines are sent (a line longer than streamHold is sent but for
// its last streamKeep bytes), and the lines of a private key are dropped
// up to its END line. Flush sends what is held; after it chunks are
// redacted and sent as they come.
type Stream struct {
	r    *Redactor
	emit func(stream, chunk string)

	mu     sync.Mutex
	held   map[string]string
	inKey  map[string]bool
	closed bool
}

// Stream bounds: how long a line may grow before part of it is sent, and
// how much of it is held back then (more than any secret format's length).
const (
	streamHold = 16 << 10
	streamKeep = 4 << 10
)

// pemKey is the private-key pattern: a PEM private key, also one cut short.
func pemKey() *regexp.Regexp { return builtinPatterns()[0].re }

// pemEnd matches the END line of a PEM private key.
var pemEnd = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----`)
})

// NewStream returns a redacting stream in front of emit.
func (r *Redactor) NewStream(emit func(stream, chunk string)) *Stream {
	return &Stream{r: r, emit: emit, held: map[string]string{}, inKey: map[string]bool{}}
}

// Write takes a chunk of stream and emits what can be sent, redacted.
func (s *Stream) Write(stream, chunk string) {
	s.mu.Lock()
	out := s.take(stream, chunk)
	s.mu.Unlock()
	if out != "" {
		s.emit(stream, out)
	}
}

func (s *Stream) take(stream, chunk string) string {
	buf := s.held[stream] + chunk
	if s.inKey[stream] {
		loc := pemEnd().FindStringIndex(buf)
		if loc == nil {
			// Keep what could be the start of the END line.
			s.held[stream] = buf[max(0, len(buf)-64):]
			return ""
		}
		buf, s.inKey[stream] = buf[loc[1]:], false
	}
	cut := len(buf)
	if !s.closed {
		cut = strings.LastIndexByte(buf, '\n') + 1
		if cut == 0 && len(buf) > streamHold {
			cut = len(buf) - streamKeep
		}
	}
	send := buf[:cut]
	s.held[stream] = buf[cut:]
	if send == "" {
		return ""
	}
	// A private key whose END line is not in yet: its lines are dropped
	// until that line comes.
	if locs := pemKey().FindAllStringIndex(send, -1); len(locs) > 0 {
		last := locs[len(locs)-1]
		s.inKey[stream] = !pemEnd().MatchString(send[last[0]:last[1]])
	}
	red, _ := s.r.Redact(send)
	return red
}

// Flush emits what is held, redacted; later chunks are sent as they come.
func (s *Stream) Flush() {
	s.mu.Lock()
	s.closed = true
	var outs [][2]string
	for stream, h := range s.held {
		if h == "" || s.inKey[stream] {
			continue
		}
		delete(s.held, stream)
		red, _ := s.r.Redact(h)
		outs = append(outs, [2]string{stream, red})
	}
	s.mu.Unlock()
	sort.Slice(outs, func(i, j int) bool { return outs[i][0] < outs[j][0] })
	for _, o := range outs {
		s.emit(o[0], o[1])
	}
}
