package approval

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// ErrEditedArgs reports edited arguments that cannot be approved: not a
// JSON object, no canonical form, or a hash that is not theirs.
var ErrEditedArgs = errors.New("invalid edited arguments")

// MaxEditedArgs bounds the size of edited arguments, in bytes.
const MaxEditedArgs = 256 << 10

// EditArgs returns raw, the arguments a person edited a call to, in the
// canonical form a decision carries: it must be one JSON object without a
// repeated key, at most MaxEditedArgs bytes.
func EditArgs(raw []byte) (json.RawMessage, error) {
	if len(raw) > MaxEditedArgs {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrEditedArgs, len(raw), MaxEditedArgs)
	}
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || t[0] != '{' {
		return nil, fmt.Errorf("%w: arguments must be a JSON object", ErrEditedArgs)
	}
	c, err := Canonical(t)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrEditedArgs, err)
	}
	return c, nil
}

// Edit makes d an approval with changes: the call runs with args (see
// EditArgs) of agent's call of tool. Arguments equal to the parked ones
// (same hash) are no change and leave d as it is.
func (d *Decision) Edit(agent, tool string, args []byte) error {
	c, err := EditArgs(args)
	if err != nil {
		return err
	}
	h := ArgsHash(agent, tool, c)
	if h == d.ArgsSHA256 {
		d.EditedArguments, d.EditedArgsSHA256 = nil, ""
		return nil
	}
	d.EditedArguments, d.EditedArgsSHA256 = c, h
	return nil
}

// Edited reports whether d approves the call with changed arguments.
func (d *Decision) Edited() bool { return len(d.EditedArguments) > 0 || d.EditedArgsSHA256 != "" }

// EffectiveArgsSHA256 is the hash of the arguments d lets run: the edited
// ones' for an approval with changes, else ArgsSHA256.
func (d *Decision) EffectiveArgsSHA256() string {
	if d.Edited() {
		return d.EditedArgsSHA256
	}
	return d.ArgsSHA256
}

// CheckEdit hashes d's edited arguments again as agent's call of tool and
// reports whether they are the ones EditedArgsSHA256 names. A decision
// without changes passes.
func (d *Decision) CheckEdit(agent, tool string) error {
	if !d.Edited() {
		return nil
	}
	if err := d.validateEdit(); err != nil {
		return fmt.Errorf("%w: %v", ErrEditedArgs, err)
	}
	if h := ArgsHash(agent, tool, d.EditedArguments); h != d.EditedArgsSHA256 {
		return fmt.Errorf("%w: they hash to %s, the decision says %s", ErrEditedArgs, h, d.EditedArgsSHA256)
	}
	if d.EditedArgsSHA256 == d.ArgsSHA256 {
		return fmt.Errorf("%w: they are the parked arguments", ErrEditedArgs)
	}
	return nil
}

// validateEdit checks the shape of an edit: only on an approval, without
// an amendment, both fields set, a JSON object a JSON object.
func (d *Decision) validateEdit() error {
	if !d.Edited() {
		return nil
	}
	switch {
	case d.Outcome != Approve:
		return errors.New("edited_arguments: only an approval can change the arguments")
	case d.AlwaysAllow != nil:
		return errors.New("edited_arguments: an approval with changes cannot also always allow")
	case len(d.EditedArguments) == 0:
		return errors.New("edited_arguments: missing while edited_args_sha256 is set")
	case !isHash(d.EditedArgsSHA256):
		return fmt.Errorf("edited_args_sha256: %q is not 64 lowercase hex digits", d.EditedArgsSHA256)
	case len(d.EditedArguments) > MaxEditedArgs:
		return fmt.Errorf("edited_arguments: %d bytes, more than %d", len(d.EditedArguments), MaxEditedArgs)
	}
	if _, err := EditArgs(d.EditedArguments); err != nil {
		return fmt.Errorf("edited_arguments: %v", err)
	}
	return nil
}

// isHash reports whether s is 64 lowercase hex digits.
func isHash(s string) bool {
	return len(s) == 64 && strings.Trim(s, "0123456789abcdef") == ""
}
