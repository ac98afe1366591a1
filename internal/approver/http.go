package approver

import (
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/toolgate/toolgate/internal/parking"
	"github.com/toolgate/toolgate/internal/telemetry"
	"github.com/toolgate/toolgate/pkg/approval"
)

//go:embed web
var webFS embed.FS

var pageTmpl = template.Must(template.ParseFS(webFS, "web/index.html"))

const (
	cookieName = "toolgate_session"
	csrfHeader = "X-CSRF-Token"
	maxBody    = 64 << 10
)

// Handler returns the service's HTTP handler: the page at /, its login,
// live events at /events, the JSON API under /api/, and the Slack
// interactivity endpoint at /slack/actions. Cross-origin browser requests
// that change state are refused.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(webFS, "web")
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", s.page)
	mux.HandleFunc("POST /login", s.login)
	mux.HandleFunc("POST /logout", s.logout)
	mux.HandleFunc("GET /healthz", telemetry.Healthz)
	mux.HandleFunc("GET /events", s.authed(s.events))
	mux.HandleFunc("GET /api/approvals", s.authed(s.list))
	mux.HandleFunc("GET /api/history", s.authed(s.history))
	mux.HandleFunc("GET /api/approvals/{id}", s.authed(s.show))
	mux.HandleFunc("POST /api/approvals/{id}/{verb}", s.authed(s.decide))
	mux.HandleFunc("POST /slack/actions", s.slackActions)
	cop := http.NewCrossOriginProtection()
	cop.AddInsecureBypassPattern("POST /slack/actions")
	return securityHeaders(cop.Handler(mux))
}

func securityHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		w.Header().Set("X-Frame-Options", "DENY")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.ServeHTTP(w, r)
	})
}

type who struct {
	identity string
	session  *session // nil for bearer
}

// authed authenticates by bearer token or session cookie; cookie requests
// that change state must echo the session's CSRF token.
func (s *Server) authed(h func(http.ResponseWriter, *http.Request, who)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if auth := r.Header.Get("Authorization"); auth != "" {
			tok, ok := strings.CutPrefix(auth, "Bearer ")
			id, valid := s.cfg.Tokens.Identity(strings.TrimSpace(tok))
			if !ok || !valid {
				w.Header().Set("WWW-Authenticate", `Bearer realm="toolgate"`)
				jsonError(w, http.StatusUnauthorized, "invalid token")
				return
			}
			h(w, r, who{identity: id})
			return
		}
		c, err := r.Cookie(cookieName)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="toolgate"`)
			jsonError(w, http.StatusUnauthorized, "authentication required: Authorization: Bearer <token>, or log in")
			return
		}
		sess, ok := s.sessions.check(c.Value, s.now())
		if !ok {
			jsonError(w, http.StatusUnauthorized, "session expired: log in again")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Header.Get(csrfHeader) != sess.CSRF {
			jsonError(w, http.StatusForbidden, "missing or wrong "+csrfHeader)
			return
		}
		h(w, r, who{identity: sess.Identity, session: &sess})
	}
}

func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	data := struct {
		Identity, CSRF, Error string
		// Tools is the page's table of how to show the built-in tools'
		// arguments (toolDisplays).
		Tools string
	}{Tools: toolDisplays}
	if c, err := r.Cookie(cookieName); err == nil {
		if sess, ok := s.sessions.check(c.Value, s.now()); ok {
			data.Identity, data.CSRF = sess.Identity, sess.CSRF
		}
	}
	if r.URL.Query().Get("error") != "" {
		data.Error = "That token is not valid."
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := pageTmpl.Execute(w, data); err != nil {
		s.log.Warn("render page", "err", err)
	}
}

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxBody)
	id, ok := s.cfg.Tokens.Identity(strings.TrimSpace(r.PostFormValue("token")))
	if !ok {
		s.log.Warn("failed login", "remote", r.RemoteAddr)
		w.Header().Set("Location", "/?error=1")
		w.WriteHeader(http.StatusSeeOther)
		return
	}
	val, _ := s.sessions.issue(id, s.now())
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: val, Path: "/", HttpOnly: true, Secure: s.secureCookie(r),
		SameSite: http.SameSiteStrictMode, MaxAge: int(s.cfg.SessionTTL / time.Second)})
	s.log.Info("login", "identity", id)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func (s *Server) logout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true, Secure: s.secureCookie(r), MaxAge: -1,
		SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// events streams snapshots to the page (server-sent events): one on
// connect and one after every change.
func (s *Server) events(w http.ResponseWriter, r *http.Request, u who) {
	fl, ok := w.(http.Flusher)
	if !ok {
		jsonError(w, http.StatusInternalServerError, "streaming unsupported")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	ch, cancel := s.subscribe()
	defer cancel()
	send := func() bool {
		b, _ := json.Marshal(s.snapshot(u.identity))
		_, err := fmt.Fprintf(w, "event: snapshot\ndata: %s\n\n", b)
		fl.Flush()
		return err == nil
	}
	if !send() {
		return
	}
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ch:
			if !send() {
				return
			}
		case <-keep.C:
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return
			}
			fl.Flush()
		}
	}
}

func (s *Server) list(w http.ResponseWriter, r *http.Request, _ who) {
	all, err := parking.List(r.Context(), s.kv)
	if err != nil {
		jsonError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	out := []View{}
	for _, p := range all {
		if p.Status == approval.Pending {
			out = append(out, viewOf(p))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) history(w http.ResponseWriter, _ *http.Request, u who) {
	writeJSON(w, http.StatusOK, s.snapshot(u.identity).History)
}

func (s *Server) show(w http.ResponseWriter, r *http.Request, _ who) {
	p, err := s.get(r.Context(), r.PathValue("id"))
	if err != nil {
		s.fail(w, err)
		return
	}
	writeJSON(w, http.StatusOK, viewOf(p))
}

// decideBody is the JSON body of approve, reject and answer.
type decideBody struct {
	Comment     string          `json:"comment"`
	Reason      string          `json:"reason"`
	Answer      string          `json:"answer"`
	AlwaysAllow json.RawMessage `json:"always_allow"`
	// Arguments approve the call with changes (approve only).
	Arguments json.RawMessage `json:"arguments"`
}

func (s *Server) decide(w http.ResponseWriter, r *http.Request, u who) {
	var in Input
	switch r.PathValue("verb") {
	case "approve":
		in.Outcome = approval.Approve
	case "reject":
		in.Outcome = approval.Reject
	case "answer":
		in.Outcome = approval.Answer
	default:
		jsonError(w, http.StatusNotFound, "unknown action "+r.PathValue("verb")+": approve, reject or answer")
		return
	}
	var b decideBody
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b); err != nil && !errors.Is(err, io.EOF) {
		jsonError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	in.Comment, in.Reason, in.Answer, in.Arguments = b.Comment, b.Reason, b.Answer, b.Arguments
	if in.Outcome == approval.Reject && strings.TrimSpace(in.Reason) == "" {
		jsonError(w, http.StatusBadRequest, `reason: a rejection needs a reason ({"reason": "..."})`)
		return
	}
	if in.Outcome == approval.Answer && in.Answer == "" {
		jsonError(w, http.StatusBadRequest, `answer: empty ({"answer": "..."})`)
		return
	}
	if aa := strings.TrimSpace(string(b.AlwaysAllow)); aa != "" && aa != "null" && aa != "false" {
		if in.Outcome != approval.Approve {
			jsonError(w, http.StatusBadRequest, "always_allow: only with approve")
			return
		}
		in.AlwaysAllow = &approval.Amendment{}
		if aa != "true" {
			var sc struct {
				CommandPrefix string `json:"command_prefix"`
				PathPattern   string `json:"path_pattern"`
			}
			if err := json.Unmarshal(b.AlwaysAllow, &sc); err != nil {
				jsonError(w, http.StatusBadRequest, `always_allow: want true or {"command_prefix": "...", "path_pattern": "..."}`)
				return
			}
			in.AlwaysAllow.CommandPrefix, in.AlwaysAllow.PathPattern = sc.CommandPrefix, sc.PathPattern
		}
	}
	res, err := s.Decide(r.Context(), u.identity, r.PathValue("id"), in)
	if err != nil {
		s.fail(w, err)
		return
	}
	code := http.StatusOK
	if res.Status == "published" {
		code = http.StatusAccepted
	}
	writeJSON(w, code, res)
}

func (s *Server) fail(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrNotFound):
		jsonError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, ErrDecided):
		jsonError(w, http.StatusConflict, err.Error())
	case errors.Is(err, ErrBadDecision):
		jsonError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, ErrForbidden):
		jsonError(w, http.StatusForbidden, err.Error())
	case errors.Is(err, ErrRefused):
		jsonError(w, http.StatusUnprocessableEntity, err.Error())
	default:
		s.log.Error("approver", "err", err)
		jsonError(w, http.StatusServiceUnavailable, err.Error())
	}
}

// slackActions handles Slack's interactivity requests (button clicks) after
// verifying their signature and timestamp.
func (s *Server) slackActions(w http.ResponseWriter, r *http.Request) {
	if s.cfg.SlackSigningSecret == "" {
		http.NotFound(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		jsonError(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	if err := VerifySlack(s.cfg.SlackSigningSecret, r.Header, body, s.now()); err != nil {
		s.log.Warn("slack request refused", "err", err)
		jsonError(w, http.StatusUnauthorized, err.Error())
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		jsonError(w, http.StatusBadRequest, "body is not form-encoded: "+err.Error())
		return
	}
	var p struct {
		Type string `json:"type"`
		User struct {
			ID       string `json:"id"`
			Username string `json:"username"`
		} `json:"user"`
		Actions []struct {
			ActionID string `json:"action_id"`
			Value    string `json:"value"`
		} `json:"actions"`
		State slackState `json:"state"`
	}
	if err := json.Unmarshal([]byte(form.Get("payload")), &p); err != nil {
		jsonError(w, http.StatusBadRequest, "payload: "+err.Error())
		return
	}
	reply := func(text string) {
		writeJSON(w, http.StatusOK, map[string]any{"response_type": "ephemeral", "replace_original": false, "text": text})
	}
	identity, ok := s.cfg.SlackUsers[p.User.ID]
	if !ok {
		s.log.Warn("slack user is not an approver", "slack_user", p.User.ID, "username", p.User.Username)
		reply("You are not an approver for toolgate.")
		return
	}
	if p.Type != "block_actions" || len(p.Actions) != 1 {
		reply("Nothing to do.")
		return
	}
	act := p.Actions[0]
	in := Input{Outcome: approval.Approve, Comment: "approved in Slack"}
	switch act.ActionID {
	case SlackApprove:
	case SlackReject:
		in = Input{Outcome: approval.Reject, Reason: "rejected in Slack by " + identity}
	case SlackApproveEdit:
		args, err := slackArgs(p.State)
		if err != nil {
			reply(fmt.Sprintf("Call %s: %v", act.Value, err))
			return
		}
		in = Input{Outcome: approval.Approve, Comment: "approved with changes in Slack", Arguments: args}
	default:
		reply("Unknown action.")
		return
	}
	res, err := s.Decide(r.Context(), identity, act.Value, in)
	if err != nil {
		reply(fmt.Sprintf("Call %s: %v", act.Value, err))
		return
	}
	reply(fmt.Sprintf("Call %s: %s by %s.", act.Value, res.Status, identity))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(true)
	_ = enc.Encode(v)
}

func jsonError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
