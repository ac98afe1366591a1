package worker

import (
	"sync"

	"github.com/toolgate/toolgate/pkg/events"
	"github.com/toolgate/toolgate/pkg/hooks"
	"github.com/toolgate/toolgate/pkg/policy"
)

// builtinRedactor removes the common secret formats from the gate's view
// of a call, whatever the worker's own redaction is configured to do.
var builtinRedactor = sync.OnceValue(func() *hooks.Redactor {
	r, err := hooks.NewRedactor(nil, nil)
	if err != nil {
		panic("toolgate: built-in secret patterns: " + err.Error())
	}
	return r
})

// wireJudged turns the gate's view of a call into the audit's, with
// secrets removed: a view a secret was removed from is marked Redacted
// (it is not judged again on what is left).
func (w *Worker) wireJudged(j *policy.Judged) *events.Judged {
	if j == nil {
		return nil
	}
	out := &events.Judged{Workspace: j.Workspace, Kind: string(j.Kind), Unknown: j.Unknown, Hosts: j.Hosts}
	redact := func(s string) string {
		if s == "" {
			return s
		}
		r, kinds := builtinRedactor().Redact(s)
		if w.cfg.Redact != nil {
			var more []string
			r, more = w.cfg.Redact(r)
			kinds = append(kinds, more...)
		}
		if len(kinds) > 0 {
			out.Redacted = true
		}
		return r
	}
	out.Command, out.Workdir = redact(j.Command), redact(j.Workdir)
	out.Path, out.Pattern = redact(j.Path), redact(j.Pattern)
	if len(j.Links) > 0 {
		out.Links = make(map[string]string, len(j.Links))
		for k, v := range j.Links {
			out.Links[redact(k)] = redact(v)
		}
	}
	return out
}
