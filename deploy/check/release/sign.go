package release

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha512"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Namespace is the namespace of release signatures (ssh-keygen -Y ... -n):
// a signature made for a release verifies for nothing else.
const Namespace = "toolgate-release"

// Signer signs release files as `ssh-keygen -Y sign -n toolgate-release`
// does (the SSHSIG format, RFC-style armour, SHA-512 of the file), with
// an ed25519 key: anyone verifies with OpenSSH alone,
//
//	ssh-keygen -Y verify -f allowed_signers -I release@toolgate -n toolgate-release -s SHA256SUMS.sig < SHA256SUMS
//
// against the public keys the repository commits
// (deploy/release/allowed_signers). Keyless signing (Sigstore) needs an
// identity provider and a transparency log online; a documented key works
// offline in CI and on the verifier's machine.
type Signer struct {
	key ssh.Signer
}

// NewSigner reads an ed25519 private key: an OpenSSH private key
// (ssh-keygen -t ed25519, without a passphrase) or PKCS#8 PEM (openssl
// genpkey -algorithm ed25519).
func NewSigner(pemKey []byte) (*Signer, error) {
	raw, err := ssh.ParseRawPrivateKey(pemKey)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	var k ed25519.PrivateKey
	switch v := raw.(type) {
	case ed25519.PrivateKey:
		k = v
	case *ed25519.PrivateKey:
		k = *v
	default:
		return nil, fmt.Errorf("signing key: a %T, want ed25519", raw)
	}
	s, err := ssh.NewSignerFromKey(k)
	if err != nil {
		return nil, fmt.Errorf("signing key: %w", err)
	}
	return &Signer{key: s}, nil
}

// PublicKey is the signer's public key in authorized_keys form
// (ssh-ed25519 AAAA...).
func (s *Signer) PublicKey() string {
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(s.key.PublicKey())))
}

// ErrNotAllowed reports a signing key an allowed_signers file does not list.
var ErrNotAllowed = errors.New("signing key not in allowed_signers")

// ListedIn checks that an allowed_signers file lists the signer's key,
// so that a release is never signed with a key verifiers would refuse.
func (s *Signer) ListedIn(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("allowed signers: %w", err)
	}
	defer f.Close()
	want := s.key.PublicKey().Marshal()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		// principals [options] keytype base64: the key is the field after
		// its type.
		fields := strings.Fields(l)
		for i := 0; i+1 < len(fields); i++ {
			if fields[i] == ssh.KeyAlgoED25519 {
				if b, err := base64.StdEncoding.DecodeString(fields[i+1]); err == nil && bytes.Equal(b, want) {
					return nil
				}
			}
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("allowed signers: %w", err)
	}
	return fmt.Errorf("%w: %s does not list %s", ErrNotAllowed, path, s.PublicKey())
}

// Sign returns the armoured SSH signature of msg.
func (s *Signer) Sign(msg []byte) []byte {
	h := sha512.Sum512(msg)
	var signed bytes.Buffer
	signed.WriteString("SSHSIG")
	putString(&signed, []byte(Namespace))
	putString(&signed, nil) // reserved
	putString(&signed, []byte("sha512"))
	putString(&signed, h[:])
	sig, err := s.key.Sign(rand.Reader, signed.Bytes())
	if err != nil {
		panic(err) // ed25519 signing does not fail
	}
	var blob bytes.Buffer
	blob.WriteString("SSHSIG")
	_ = binary.Write(&blob, binary.BigEndian, uint32(1))
	putString(&blob, s.key.PublicKey().Marshal())
	putString(&blob, []byte(Namespace))
	putString(&blob, nil)
	putString(&blob, []byte("sha512"))
	putString(&blob, ssh.Marshal(sig))
	b64 := base64.StdEncoding.EncodeToString(blob.Bytes())
	var out strings.Builder
	out.WriteString("-----BEGIN SSH SIGNATURE-----\n")
	for len(b64) > 70 {
		out.WriteString(b64[:70] + "\n")
		b64 = b64[70:]
	}
	out.WriteString(b64 + "\n-----END SSH SIGNATURE-----\n")
	return []byte(out.String())
}

// putString writes b as an SSH wire string: its length, then it.
func putString(w *bytes.Buffer, b []byte) {
	_ = binary.Write(w, binary.BigEndian, uint32(len(b)))
	w.Write(b)
}
