// Package eventsig signs the events a worker makes - results and audit
// events - with the worker's nkey, and verifies them for every reader. Its
// documentation is the specification of the signature format, which every
// client (Go, Python, TypeScript) implements byte for byte; the vectors
// in testdata/vectors.json are its test: a reader must accept exactly the
// vectors marked valid and refuse the others, for the reason named.
//
// # Trust
//
// A reader trusts one or more account public keys (nkeys, "A..."). An
// agent's trusted account is the toolgate account of its install, named
// by the "toolgate-services:<account key>" tag of the agent's own user
// JWT (tags are stored lower-cased: upper-case it back). Agents are issued
// by another account (the agents account), so an agent never trusts its
// own issuer.
//
// # Where the signature travels
//
// Two CloudEvents extension attributes carry it, in every content mode:
//
//   - toolgatesig: the base64url (RFC 4648 §5, no padding) ed25519
//     signature of the signing input, by the worker's nkey.
//   - toolgatesigner: the worker's NATS user JWT.
//
// In binary mode (a ce-specversion header is present) every attribute is
// a NATS header "ce-<name>" (names compared case-insensitively; the first
// value counts), its value percent-decoded as a whole when it contains
// '%' (Go's url.PathUnescape: %XX only, '+' stays; a value with a bad
// escape is taken as written), and the data is the message payload, its
// bytes exactly as received. In structured mode (header content-type
// application/cloudevents+json, or no headers and a JSON object payload)
// the payload is the event's JSON object and the attributes are its
// members (JSON strings; a signature member that is not a string counts
// as absent). The data bytes are then:
//
//   - when the member data_base64 is present, its base64 decoding;
//   - else, when datacontenttype is absent or a JSON type, the text of
//     the member "data" as it stands in the payload: from the first byte
//     after the ':' that follows its name (so whitespace between ':' and
//     the value is included) to the last byte of the value; when the
//     member occurs twice the last one counts;
//   - else the UTF-8 bytes of the JSON string "data".
//
// Workers write compact JSON, so in practice the data of a structured
// event is the value of "data" as written.
//
// # The signing input
//
// The signed bytes are pkg/events.SigningInput: for each of the five
// fields "toolgate-event-signature-v1", type, source, id, subject (empty
// when absent), in that order, the decimal byte length of the field's
// UTF-8, ':', the field, '\n'; then the lower-case hex of the SHA-256 of
// the data bytes (64 characters, no newline). For a result of call c1:
//
//	27:toolgate-event-signature-v1
//	30:dev.toolgate.call.completed.v1
//	20:toolgate://worker/w1
//	13:ann.c1:result
//	2:c1
//	<64 hex digits>
//
// # What a reader checks, in order
//
// The first check that fails names the refusal (Reason):
//
//  1. The message decodes as a CloudEvent with specversion "1.0", an
//     id, a source and a type, and its data as the JSON the type names
//     (else "malformed").
//  2. toolgatesig and toolgatesigner are both present and not empty
//     (else "unsigned").
//  3. The signer JWT is a NATS user JWT: three base64url parts; its
//     header {"typ":"JWT","alg":"ed25519-nkey"}; its claims' "nats" member
//     of type "user" and version 2; "iss" a valid account public key whose
//     ed25519 key verifies the third part (the signature) over the first
//     two parts joined by '.'; "sub" a valid user public key ("U...")
//     (else "bad-jwt"). toolgate issues version 2 JWTs only (the Go
//     decoder would also read a version 1 JWT, signed over its second
//     part alone; a reader in another language may refuse one). Public
//     nkeys are base32 (RFC 4648, no padding) of a prefix byte, the
//     32-byte ed25519 key and a little-endian CRC-16/XMODEM of both; the
//     prefix byte of "A" keys is 0, of "U" keys 20<<3 (160).
//  4. "iss" is a trusted account, and "nats"."issuer_account", when
//     present, is the same key (else "foreign-issuer").
//  5. The JWT is in force: no "exp" or now < exp, no "nbf" or now >= nbf
//     (Unix seconds; else "expired").
//  6. Exactly one of its "nats"."tags" starts with "toolgate-role:"
//     (compared lower-cased) and it names a known role: worker, approver,
//     admin or agent (else "wrong-role"); then "name" is not blank (else
//     "bad-jwt"); then the role is "worker" (else "wrong-role").
//  7. toolgatesig decodes and verifies as the ed25519 signature of the
//     signing input by the key "sub" names (else "bad-signature").
//  8. For a result: type is dev.toolgate.call.completed.v1 (else
//     "wrong-type"); source starts with "toolgate://worker/" (else
//     "wrong-source"); the subject attribute and the data's call_id are
//     the call id waited for, and the id starts with
//     pkg/events.AgentKey(agent, call id) + ":" (else "wrong-call": a
//     result replayed onto another call, or another agent's); the data's
//     agent is the agent (else "wrong-agent").
//
// # The vectors
//
// testdata/vectors.json (rewritten from fixed keys by go test -run
// TestVectorsGolden -update) holds "trusted_accounts", the account keys a
// reader trusts, and "vectors", each a message as a reader receives it:
// "subject", "headers" (name to value; in structured mode without
// headers only Nats-Msg-Id, which carries no attribute), "data" (the
// payload, standard base64), "mode"; whom it is read for: "agent" and "call_id"; and the verdict: "valid", and
// "reason" (as above) when refused, or "signing_input" and the decoded
// "result" when valid. Their JWTs never expire but the one that must be
// refused as expired.
//
// A refused event is dropped and the reader goes on waiting for the real
// one: inside the agents account another agent can make a message land on
// an agent's result subject, so a refusal is never the call's outcome.
// A reader may keep a JWT it checked (steps 3 to 6) until it expires.
package eventsig
