package bash

import (
	"errors"
	"fmt"
	"strings"
)

// Mode says whether commands run inside bubblewrap.
type Mode string

// The sandbox modes.
const (
	// ModeAuto uses bubblewrap when it is installed and works, and runs
	// commands without isolation otherwise (Detect says which, so the
	// worker can say it loudly at start-up). The zero Mode means ModeAuto.
	ModeAuto Mode = "auto"
	// ModeRequire uses bubblewrap or refuses to start.
	ModeRequire Mode = "require"
	// ModeOff never uses bubblewrap.
	ModeOff Mode = "off"
)

// ErrInvalidMode is returned for a sandbox mode other than auto, require
// or off.
var ErrInvalidMode = errors.New("invalid sandbox mode")

// ParseMode parses auto, require or off (case-insensitive, surrounding
// space ignored); the empty string is auto. Anything else is an error
// wrapping ErrInvalidMode that names the value and the choices.
func ParseMode(s string) (Mode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return ModeAuto, nil
	case "require":
		return ModeRequire, nil
	case "off":
		return ModeOff, nil
	}
	return "", fmt.Errorf("%w %q: want auto, require or off", ErrInvalidMode, s)
}

// String returns the mode's name; the zero Mode is "auto".
func (m Mode) String() string {
	if m == "" {
		return string(ModeAuto)
	}
	return string(m)
}

// Set parses s into m, so that a *Mode is a flag.Value.
func (m *Mode) Set(s string) error {
	v, err := ParseMode(s)
	if err != nil {
		return err
	}
	*m = v
	return nil
}

// UnmarshalText parses a mode from configuration (YAML, JSON, env).
func (m *Mode) UnmarshalText(b []byte) error { return m.Set(string(b)) }

// MarshalText returns the mode's name.
func (m Mode) MarshalText() ([]byte, error) { return []byte(m.String()), nil }
