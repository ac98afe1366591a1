package tools

import "encoding/json"

// Readers of a call's decoded arguments (Call.Args). They never fail: an
// argument that is absent or of another type reads as the zero value (and
// false where they say whether it was there), since the schema has
// already checked the arguments the tool requires.

// ArgString returns the string argument key, or "".
func ArgString(args map[string]any, key string) string {
	v, _ := args[key].(string)
	return v
}

// ArgStrings returns the strings of the list argument key, skipping items
// that are not strings.
func ArgStrings(args map[string]any, key string) []string {
	list, _ := args[key].([]any)
	var out []string
	for _, v := range list {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// ArgInt returns the first of keys holding a number, truncated to an
// integer, and whether there was one. Numbers decode as json.Number after
// validation and as float64 when a handler is called directly.
func ArgInt(args map[string]any, keys ...string) (int64, bool) {
	for _, k := range keys {
		switch v := args[k].(type) {
		case json.Number:
			if n, err := v.Int64(); err == nil {
				return n, true
			}
			if f, err := v.Float64(); err == nil {
				return int64(f), true
			}
		case float64:
			return int64(v), true
		case int:
			return int64(v), true
		case int64:
			return v, true
		}
	}
	return 0, false
}

// ArgBool returns the first of keys holding a boolean, or false.
func ArgBool(args map[string]any, keys ...string) bool {
	for _, k := range keys {
		if v, ok := args[k].(bool); ok {
			return v
		}
	}
	return false
}
