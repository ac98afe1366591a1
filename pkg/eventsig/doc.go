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
//     signature of the signing input, by the worker's nkey (the single
//     form); or, for an event signed together with others, the
//     co-signed form (below), recognised by its '.' (a character
//     base64url never has).
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
//     signing input by the key "sub" names, in the single form; or, when
//     it holds a '.', in the co-signed form (below: it parses strictly,
//     its path leads from the event's leaf to a root, and its signature
//     by that key verifies the batch signing message of that root)
//     (else "bad-signature").
//  8. For a result: type is dev.toolgate.call.completed.v1 (else
//     "wrong-type"); source starts with "toolgate://worker/" (else
//     "wrong-source"); the subject attribute and the data's call_id are
//     the call id waited for, and the id starts with
//     pkg/events.AgentKey(agent, call id) + ":" (else "wrong-call": a
//     result replayed onto another call, or another agent's); the data's
//     agent is the agent (else "wrong-agent").
//
// # Co-signed events
//
// A worker may sign several events with one ed25519 signature (a call's
// result and its audit events; the single form costs a signature per
// event). Each event still verifies on its own: it carries the signature
// and a Merkle inclusion proof of its signing input in the tree signed.
// toolgatesig is then five parts joined by '.':
//
//	<sig>.<index>.<size>.<salt>.<path>
//
// where:
//
//   - sig: base64url of the 64-byte ed25519 signature, by the key the
//     signer JWT's "sub" names, of the batch signing message (below).
//   - index, size: decimal, ASCII digits only, no sign, no leading zero
//     ("0" itself is allowed for index); 2 <= size <= 65536 and
//     0 <= index < size.
//   - salt: base64url of exactly 16 bytes (22 characters), random per
//     event.
//   - path: base64url of the inclusion path's hashes, 32 bytes each,
//     concatenated in the order the verification consumes them (leaf to
//     root); its decoded length is a multiple of 32 and exactly the
//     length the verification needs for (index, size): it consumes every
//     hash and ends with sn == 0.
//
// Every part is strict base64url (RFC 4648 §5): no padding, no character
// outside the alphabet (line breaks included), and canonical (encoding
// the decoded bytes again gives the same text: no stray bits in the last
// character). A reader refuses anything else: any failure to parse or
// verify this form is "bad-signature".
//
// Hashes (SHA-256; leaves and nodes are told apart by their first byte,
// as in RFC 6962):
//
//	leaf = SHA-256(0x00 || salt (16 bytes) || signing input)
//	node = SHA-256(0x01 || left (32 bytes) || right (32 bytes))
//
// The tree over the leaves D[0..n) of the events signed together, in
// their order, is RFC 6962's Merkle Tree Hash: of one leaf, that leaf's
// hash; for n > 1, with k the largest power of two smaller than n,
// MTH(D[0:n]) = node(MTH(D[0:k]), MTH(D[k:n])). An event's path is
// RFC 6962's PATH(index, D[0:n]).
//
// The reader computes the root from the event's leaf and its path as
// RFC 9162 §2.1.3.2 verifies an inclusion proof:
//
//	fn = index; sn = size - 1; r = leaf
//	for each p in path:
//	    if sn == 0: refuse
//	    if (fn & 1) == 1 or fn == sn:
//	        r = node(p, r)
//	        if (fn & 1) == 0:
//	            while (fn & 1) == 0 and fn != 0: fn >>= 1; sn >>= 1
//	    else:
//	        r = node(r, p)
//	    fn >>= 1; sn >>= 1
//	sn must be 0 at the end (else refuse); root = r
//
// The batch signing message is the ASCII bytes
// "23:toolgate-event-batch-v1\n", then size in decimal (as in the
// toolgatesig) and "\n", then the 64 lower-case hex digits of root, no
// newline after them (23 is the length of "toolgate-event-batch-v1"; the
// single form's input starts "27:toolgate-event-signature-v1\n", so the
// two never meet). For a batch of two:
//
//	23:toolgate-event-batch-v1
//	2
//	<64 hex digits>
//
// The event verifies when ed25519.Verify(key, batch signing message,
// sig) holds.
//
// The salt: the path shows its reader hashes of the other events signed
// in the same batch, possibly another agent's. Without a salt a reader
// who can guess another event's whole signing input could confirm the
// guess from a sibling hash; with 16 random bytes per leaf a sibling hash
// says nothing.
//
// The size is signed; the index is bound with it (for a given size each
// index walks a path differently, so another index gives another root):
// an event signed in a batch has exactly one valid co-signed
// toolgatesig.
//
// A worker writes the single form for an event signed alone; one signed
// with others in the co-signed form (never size 1). Every other check is
// the same for both forms, in the same order.
//
// # The vectors
//
// testdata/vectors.json (rewritten from fixed keys by go test
// ./pkg/eventsig -run TestVectorsGolden -update) holds "trusted_accounts", the account keys a
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
