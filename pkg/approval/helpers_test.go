package approval

import "encoding/json"

func jsonRoundTrip(d *Decision) (*Decision, error) {
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, err
	}
	var out Decision
	return &out, json.Unmarshal(raw, &out)
}
