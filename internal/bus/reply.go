package bus

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
)

// ErrReplyRefused reports a request whose reply subject is not an inbox:
// a responder never answers there.
var ErrReplyRefused = errors.New("reply subject is not an inbox")

// ReplyAllowed reports whether a toolgate responder may answer on reply:
// an inbox (_INBOX.… of toolgate's roles and of clients without
// credentials, _INBOX_<agent>.… of an agent) or the reply a request gets
// crossing from the agents account (_R_.…, which the server delivers to
// the requester's own reply subject in that account). Never a subject a
// stream or bucket keeps: a caller naming one as its reply would make the
// responder write there in its stead.
func ReplyAllowed(reply string) bool {
	for _, p := range []string{"_INBOX.", "_INBOX_", "_R_."} {
		if len(reply) > len(p) && strings.HasPrefix(reply, p) {
			return true
		}
	}
	return false
}

// Respond answers request m with reply, when m's reply subject is one
// ReplyAllowed accepts; else it answers nothing and returns
// ErrReplyRefused.
func Respond(m *nats.Msg, reply *nats.Msg) error {
	if !ReplyAllowed(m.Reply) {
		return fmt.Errorf("%w: %q", ErrReplyRefused, m.Reply)
	}
	reply.Subject = m.Reply
	return m.RespondMsg(reply)
}
