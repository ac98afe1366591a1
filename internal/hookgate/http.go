package hookgate

import (
	"encoding/json"
	"io"
	"net/http"

	"github.com/toolgate/toolgate/internal/loopback"
)

// maxBody bounds a hook request.
const maxBody = 4 << 20

// Handler serves Claude Code's HTTP hooks: a POST of the hook payload,
// answered with the decision. With loopbackOnly, requests whose Host is
// not a loopback name are refused (DNS rebinding).
func Handler(j *Judge, loopbackOnly bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST the hook payload", http.StatusMethodNotAllowed)
			return
		}
		if loopbackOnly && !loopback.Host(r.Host) {
			http.Error(w, "forbidden: Host is not a loopback name", http.StatusForbidden)
			return
		}
		if o := r.Header.Get("Origin"); o != "" {
			http.Error(w, "forbidden: browser requests are not hooks", http.StatusForbidden)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil || len(body) > maxBody {
			http.Error(w, "hook payload too large or unreadable", http.StatusRequestEntityTooLarge)
			return
		}
		var in Input
		out := Output{}
		if err := json.Unmarshal(body, &in); err != nil {
			out = decision("deny", "toolgate: the hook payload is not JSON: "+err.Error())
		} else {
			out = j.Decide(r.Context(), in)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}
