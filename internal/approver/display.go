package approver

import (
	"encoding/json"

	"github.com/toolgate/toolgate/pkg/tooldef"
)

// toolDisplay is what the page needs to know of a built-in tool to show a
// call's arguments as a person reads them.
type toolDisplay struct {
	// Command is the argument holding the command line, shown first as
	// "$ <command>".
	Command string `json:"command,omitempty"`
	// InDiff are the arguments the diff shows (the new content, the text
	// replaced and its replacement), left out of the argument list when
	// the call has a diff.
	InDiff []string `json:"in_diff,omitempty"`
}

// toolDisplays is the page's table of toolDisplay by tool name and alias,
// as JSON, made from the tools' definitions.
var toolDisplays = func() string {
	m := map[string]toolDisplay{}
	for _, d := range tooldef.All() {
		var td toolDisplay
		if a := d.Arg(tooldef.Command); a != nil {
			td.Command = a.Name
		}
		for _, r := range []tooldef.Role{tooldef.Content, tooldef.OldText, tooldef.NewText} {
			if a := d.Arg(r); a != nil {
				td.InDiff = append(td.InDiff, a.Name)
			}
		}
		if td.Command == "" && td.InDiff == nil {
			continue
		}
		for _, n := range d.Names() {
			m[n] = td
		}
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err) // a map of strings
	}
	return string(b)
}()
