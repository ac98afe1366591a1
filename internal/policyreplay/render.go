package policyreplay

import (
	"encoding/json"
	"fmt"
	"html/template"
	"io"
	"time"
)

// window says which time the replay covered.
func (s Summary) window() string {
	since, until := "the start of the trail", "now"
	if !s.Since.IsZero() {
		since = s.Since.UTC().Format(time.RFC3339)
	}
	if !s.Until.IsZero() {
		until = s.Until.UTC().Format(time.RFC3339)
	}
	return since + " to " + until
}

// Text prints the summary, then every changed call.
func (r Result) Text(w io.Writer) error {
	s := r.Summary
	if s.Calls == 0 {
		_, err := fmt.Fprintf(w, "no audited calls from %s: nothing to replay\n", s.window())
		return err
	}
	fmt.Fprintf(w, "replayed %s (revision %s) over the calls audited from %s\n", s.Policy, s.Revision, s.window())
	fmt.Fprintf(w, "  calls judged    %d\n  unchanged       %d\n", s.Judged, s.Unchanged)
	for _, t := range Transitions {
		fmt.Fprintf(w, "  %-15s %d\n", t, s.Changes[t])
	}
	fmt.Fprintf(w, "  not replayable  %d\n", s.NotReplayable)
	if len(r.Changes) == 0 {
		_, err := fmt.Fprintln(w, "no call would change")
		return err
	}
	fmt.Fprintf(w, "%d call(s) would change:\n", len(r.Changes))
	for _, c := range r.Changes {
		fmt.Fprintf(w, "%s %s %s %s: %q\n  then %s (%s)\n  now  %s (%s): %s\n", c.Time.Format(time.RFC3339), c.Agent, c.Tool, c.CallID,
			c.Input, c.Before.Action, c.Before.Rule, c.After.Action, c.After.Rule, c.After.Reason)
	}
	return nil
}

// summaryLine is the final object of the JSON output.
type summaryLine struct {
	Summary Summary `json:"summary"`
}

// JSON prints one object per changed call, then {"summary": ...}.
func (r Result) JSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for _, c := range r.Changes {
		if err := enc.Encode(c); err != nil {
			return err
		}
	}
	return enc.Encode(summaryLine{Summary: r.Summary})
}

// bar is one bar of the page's chart.
type bar struct {
	Label string
	Count int
	Y     int
	Width int
	Class string
}

// page is what the HTML template renders.
type page struct {
	Summary Summary
	Window  string
	Bars    []bar
	Height  int
	Changes []Change
}

// HTML writes a self-contained page (no script, no external asset): the
// summary as an inline SVG bar chart and the changed calls as a table.
func (r Result) HTML(w io.Writer) error {
	s := r.Summary
	rows := []bar{{Label: "unchanged", Count: s.Unchanged, Class: "same"}}
	for _, t := range Transitions {
		rows = append(rows, bar{Label: t, Count: s.Changes[t], Class: "change"})
	}
	rows = append(rows, bar{Label: "not replayable", Count: s.NotReplayable, Class: "none"})
	most := 1
	for _, row := range rows {
		most = max(most, row.Count)
	}
	for i := range rows {
		rows[i].Y, rows[i].Width = i*26, rows[i].Count*400/most
	}
	p := page{Summary: s, Window: s.window(), Changes: r.Changes, Bars: rows}
	p.Height = len(rows) * 26
	return pageTemplate.Execute(w, p)
}

var pageTemplate = template.Must(template.New("replay").Parse(`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Policy replay: {{.Summary.Policy}}</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid #ddd; padding: .3em .5em; text-align: left; vertical-align: top; }
code { font: 13px ui-monospace, monospace; white-space: pre-wrap; overflow-wrap: anywhere; }
td:first-child { white-space: nowrap; }
.same { fill: #6a9955; } .change { fill: #d9822b; } .none { fill: #999; }
.allow { color: #2e7d32; } .ask { color: #b26a00; } .deny { color: #c62828; }
svg text { font: 12px system-ui, sans-serif; fill: #222; }
</style>
</head>
<body>
<h1>Policy replay</h1>
<p>{{.Summary.Policy}} (revision {{.Summary.Revision}}) judged again the calls audited from {{.Window}}:
{{.Summary.Calls}} call(s), {{.Summary.Judged}} judged, {{.Summary.Unchanged}} unchanged, {{.Summary.NotReplayable}} not replayable.</p>
<svg id="summary" role="img" aria-label="calls by outcome" width="640" height="{{.Height}}" viewBox="0 0 640 {{.Height}}">
{{range .Bars}}<g class="bar"><text x="0" y="{{.Y}}" dy="16">{{.Label}}</text><rect class="{{.Class}}" x="120" y="{{.Y}}" width="{{.Width}}" height="20"></rect><text x="{{.Width}}" dx="126" y="{{.Y}}" dy="16">{{.Count}}</text></g>
{{end}}</svg>
<h2>Changed calls</h2>
{{if .Changes}}<table id="changes">
<thead><tr><th>time</th><th>agent</th><th>tool</th><th>call</th><th>judged input</th><th>then</th><th>now</th><th>why now</th></tr></thead>
<tbody>
{{range .Changes}}<tr><td>{{.Time.Format "2006-01-02T15:04:05Z07:00"}}</td><td>{{.Agent}}</td><td>{{.Tool}}</td><td><code>{{.CallID}}</code></td><td><code>{{.Input}}</code></td><td class="{{.Before.Action}}">{{.Before.Action}} <code>{{.Before.Rule}}</code></td><td class="{{.After.Action}}">{{.After.Action}} <code>{{.After.Rule}}</code></td><td>{{.After.Reason}}</td></tr>
{{end}}</tbody>
</table>{{else}}<p>No call would change.</p>{{end}}
</body>
</html>
`))
