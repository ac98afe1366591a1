package events

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"

	"github.com/cloudevents/sdk-go/v2/event"
)

// The signature of an event a worker makes (results and audit events)
// travels in two CloudEvents extension attributes, so that it survives
// every content mode: in binary mode they are the ce-toolgatesig and
// ce-toolgatesigner headers, in structured mode members of the event's
// JSON (a result goes out in the mode its call came in, and a
// structured-bare message has no headers at all).
const (
	// ExtSignature is the base64url (no padding) ed25519 signature of
	// SigningInput by the signer's nkey, or the co-signed form of an
	// event signed together with others (pkg/eventsig).
	ExtSignature = "toolgatesig"
	// ExtSigner is the signer's NATS user JWT: its subject is the key
	// that signed, its issuer the account that vouches for it, its role
	// tag the signer's role.
	ExtSigner = "toolgatesigner"
)

// sigDomain starts every signing input, so that a signature over an
// event is never one over anything else toolgate signs.
const sigDomain = "toolgate-event-signature-v1"

// SigningInput is what an event's signature covers: its type, source, id
// and subject attributes and the SHA-256 of its data bytes as sent. The
// data of a result or audit event names its call id, agent, tool and
// status, so they are covered with it.
func SigningInput(typ, source, id, subject string, data []byte) []byte {
	sum := sha256.Sum256(data)
	b := make([]byte, 0, len(sigDomain)+len(typ)+len(source)+len(id)+len(subject)+5*10+64)
	for _, s := range [...]string{sigDomain, typ, source, id, subject} {
		// length-prefixed: no field can run into the next
		b = strconv.AppendInt(b, int64(len(s)), 10)
		b = append(b, ':')
		b = append(b, s...)
		b = append(b, '\n')
	}
	return hex.AppendEncode(b, sum[:])
}

// EventSigningInput is SigningInput of a decoded event.
func EventSigningInput(ev event.Event) []byte {
	return SigningInput(ev.Type(), ev.Source(), ev.ID(), ev.Subject(), ev.Data())
}

// Signature returns the signature and signer extensions of an event
// (empty when it carries none).
func Signature(ev event.Event) (sig, signer string) {
	ext := ev.Extensions()
	sig, _ = ext[ExtSignature].(string)
	signer, _ = ext[ExtSigner].(string)
	return sig, signer
}

// SignFunc signs an event's SigningInput, returning the signature and
// the signer's JWT for ExtSignature and ExtSigner.
type SignFunc func(input []byte) (sig, signer string, err error)

// EventHash is the hex SHA-256 of an event's SigningInput: what the next
// audit event of a worker's chain names as its prev.
func EventHash(signingInput []byte) string {
	sum := sha256.Sum256(signingInput)
	return hex.EncodeToString(sum[:])
}
