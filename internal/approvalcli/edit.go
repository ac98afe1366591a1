package approvalcli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/toolgate/toolgate/pkg/approval"
)

// readEdit reads the arguments of an approval with changes from --args or
// --args-file (- is stdin), checked to be one JSON object; nil when
// neither is given.
func readEdit(arg, file string, stdin io.Reader) (json.RawMessage, error) {
	var raw []byte
	var from string
	switch {
	case arg != "" && file != "":
		return nil, errors.New("approvals approve: give --args or --args-file, not both")
	case arg != "":
		raw, from = []byte(arg), "--args"
	case file == "-":
		b, err := io.ReadAll(io.LimitReader(stdin, approval.MaxEditedArgs+1))
		if err != nil {
			return nil, fmt.Errorf("--args-file -: %w", err)
		}
		raw, from = b, "--args-file -"
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--args-file: %w", err)
		}
		raw, from = b, "--args-file "+file
	default:
		return nil, nil
	}
	c, err := approval.EditArgs(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	return c, nil
}
