package hooks

import (
	"strings"
	"testing"
)

// Secrets in every common format, as a file (or a command) would show
// them. Built from parts so that no scanner mistakes this file for a leak.
var (
	awsKeyID   = "AKIA" + "IOSFODNN7EXAMPLE"
	awsSecret  = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
	ghToken    = "ghp_" + strings.Repeat("a1B2c3D4e5", 3) + "F6g7H8"
	ghPAT      = "github_pat_" + "11ABCDEFG0" + strings.Repeat("x", 30)
	slackToken = "xoxb-" + "123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
	jwtToken   = "eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ" + "." + "eyJqdGkiOiJBQkNERUZHIiwiaWF0IjoxNzAwMDAwMDAwfQ" + ".c2lnbmF0dXJlLWJ5dGVz"
	natsSeed   = "SU" + strings.Repeat("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 2)[:56]
	accSeed    = "SA" + strings.Repeat("QRSTUVWXYZ234567ABCDEFGHIJKLMNOP", 2)[:56]
	pemText    = "-----BEGIN RSA " + "PRIVATE KEY-----\nMIIEowIBAAKCAQEA1234567890abcdef\nQWERTYUIOPASDFGHJKLZXCVBNM0987\n-----END RSA " + "PRIVATE KEY-----"
	apiKeyLine = "api_key=" + "sk_live_51HxYzAbCdEf"
	bearerLine = "Authorization: Bearer " + "abcDEF0123456789ghiJKL"
	urlWithPw  = "nats://worker:" + "s3cr3t-pa55" + "@nats.internal:4222"
)

// fixture is a file holding every format, one a line, with ordinary text
// around them (which must stay).
func fixture() string {
	return strings.Join([]string{
		"ordinary line: the build passed",
		"aws_access_key_id = " + awsKeyID,
		"aws_secret_access_key = " + awsSecret,
		"token: " + ghToken,
		"pat=" + ghPAT,
		"SLACK=" + slackToken,
		"jwt " + jwtToken,
		"seed " + natsSeed,
		"account " + accSeed,
		pemText,
		apiKeyLine,
		bearerLine,
		"url " + urlWithPw,
		"last ordinary line",
	}, "\n")
}

// fixtureSecrets are the secret values of fixture.
func fixtureSecrets() []string {
	return []string{awsKeyID, awsSecret, ghToken, ghPAT, slackToken, jwtToken, natsSeed, accSeed,
		"MIIEowIBAAKCAQEA1234567890abcdef", "sk_live_51HxYzAbCdEf", "abcDEF0123456789ghiJKL", "s3cr3t-pa55"}
}

func TestRedactEveryFormat(t *testing.T) {
	r, err := NewRedactor(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, in, secret, kind string
	}{
		{"aws key id", "id " + awsKeyID + " end", awsKeyID, "aws-access-key-id"},
		{"aws secret", "aws_secret_access_key=" + awsSecret, awsSecret, "aws-secret-access-key"},
		{"aws secret json", `{"AwsSecretAccessKey": "` + awsSecret + `"}`, awsSecret, "aws-secret-access-key"},
		{"github classic", "x " + ghToken, ghToken, "github-token"},
		{"github fine-grained", ghPAT, ghPAT, "github-token"},
		{"slack", slackToken, slackToken, "slack-token"},
		{"jwt", jwtToken, jwtToken, "jwt"},
		{"nats user seed", natsSeed, natsSeed, "nats-seed"},
		{"nats account seed", accSeed, accSeed, "nats-seed"},
		{"pem", "before\n" + pemText + "\nafter", "MIIEowIBAAKCAQEA", "private-key"},
		{"pem cut short", "before\n" + pemText[:60], "MIIEowIBAAKCAQEA", "private-key"},
		{"api key", apiKeyLine, "sk_live_51HxYzAbCdEf", "api-key"},
		{"api key json", `{"apiKey": "0123456789abcdef"}`, "0123456789abcdef", "api-key"},
		{"password", "password: hunter2hunter2", "hunter2hunter2", "api-key"},
		{"bearer", bearerLine, "abcDEF0123456789ghiJKL", "bearer-token"},
		{"url password", urlWithPw, "s3cr3t-pa55", "url-password"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, kinds := r.Redact(c.in)
			if strings.Contains(got, c.secret) {
				t.Fatalf("secret left in %q", got)
			}
			if !strings.Contains(got, Marker(c.kind)) {
				t.Fatalf("no %s marker in %q (kinds %v)", c.kind, got, kinds)
			}
			again, _ := r.Redact(got)
			if again != got {
				t.Fatalf("redacting twice changed %q to %q", got, again)
			}
		})
	}
}

func TestRedactLeavesOrdinaryText(t *testing.T) {
	r, _ := NewRedactor(nil, nil)
	for _, s := range []string{
		"func main() { fmt.Println(\"hello\") }",
		"SUMMARY: 3 tests passed",
		"the password field is required",
		"see https://example.com/path?q=1",
		"AKIA is a prefix; AKIA12 is too short",
		"ghp_short",
		"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----",
		"git@github.com:toolgate/toolgate.git",
	} {
		if got, kinds := r.Redact(s); got != s {
			t.Errorf("Redact(%q) = %q (%v)", s, got, kinds)
		}
	}
}

func TestRedactLiteralsAndExtraPatterns(t *testing.T) {
	r, err := NewRedactor([]string{"tok-Zq9!vv7@@", "short", ""}, map[string]string{"internal": `itk_[a-z0-9]{12}`})
	if err != nil {
		t.Fatal(err)
	}
	got, kinds := r.Redact("a tok-Zq9!vv7@@ b itk_abcdef123456 c short")
	want := "a " + Marker("worker-credential") + " b " + Marker("internal") + " c short"
	if got != want || len(kinds) != 2 {
		t.Fatalf("got %q %v, want %q", got, kinds, want)
	}
	if _, err := NewRedactor(nil, map[string]string{"bad": "("}); err == nil {
		t.Fatal("a bad pattern was accepted")
	}
}

// TestStreamCatchesSecretsSplitAcrossChunks: a secret cut by a chunk
// boundary, and the lines of a private key streamed one by one, never get
// through.
func TestStreamCatchesSecretsSplitAcrossChunks(t *testing.T) {
	r, _ := NewRedactor(nil, nil)
	text := fixture() + "\n"
	for _, size := range []int{1, 3, 7, 16, 64, 1000} {
		var got strings.Builder
		s := r.NewStream(func(stream, chunk string) { got.WriteString(chunk) })
		for i := 0; i < len(text); i += size {
			s.Write("stdout", text[i:min(i+size, len(text))])
		}
		s.Flush()
		for _, secret := range fixtureSecrets() {
			if strings.Contains(got.String(), secret) {
				t.Fatalf("chunks of %d: %q got through in %q", size, secret, got.String())
			}
		}
		if !strings.Contains(got.String(), "ordinary line: the build passed") || !strings.Contains(got.String(), "last ordinary line") {
			t.Fatalf("chunks of %d: ordinary text lost: %q", size, got.String())
		}
	}
}

func TestStreamSendsLongLinesAndFlushes(t *testing.T) {
	r, _ := NewRedactor(nil, nil)
	var chunks []string
	s := r.NewStream(func(_, chunk string) { chunks = append(chunks, chunk) })
	s.Write("stdout", strings.Repeat("x", streamHold+10))
	if len(chunks) != 1 || len(chunks[0]) != streamHold+10-streamKeep {
		t.Fatalf("a long line: %d chunks", len(chunks))
	}
	s.Write("stdout", "tail without newline")
	s.Flush()
	if last := chunks[len(chunks)-1]; !strings.HasSuffix(last, "tail without newline") {
		t.Fatalf("flush sent %q", last)
	}
	s.Write("stderr", "after flush "+natsSeed)
	if last := chunks[len(chunks)-1]; last != "after flush "+Marker("nats-seed") {
		t.Fatalf("after flush: %q", last)
	}
}

func FuzzRedact(f *testing.F) {
	f.Add(fixture())
	f.Add("password=" + strings.Repeat("a", 100))
	r, _ := NewRedactor([]string{"literal-secret"}, nil)
	f.Fuzz(func(t *testing.T, s string) {
		once, _ := r.Redact(s)
		twice, _ := r.Redact(once)
		if once != twice {
			t.Fatalf("not idempotent: %q → %q → %q", s, once, twice)
		}
		if strings.Contains(once, "literal-secret") {
			t.Fatalf("literal left in %q", once)
		}
	})
}

// BenchmarkRedact redacts a 1 MiB output of ordinary log lines, without
// secrets and with the fixture's secrets every 64 KiB, as the built-in
// hook does for every output.
func BenchmarkRedact(b *testing.B) {
	r, _ := NewRedactor([]string{"worker-seed-literal-0123456789"}, nil)
	line := "2026-11-23T14:00:00Z INFO request served path=/api/v1/items status=200 bytes=5123\n"
	for _, c := range []struct {
		name    string
		secrets bool
	}{{"plain", false}, {"secrets", true}} {
		var sb strings.Builder
		for sb.Len() < 1<<20 {
			sb.WriteString(line)
			if c.secrets && sb.Len()%(64<<10) < len(line) {
				sb.WriteString(fixture())
			}
		}
		s := sb.String()
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(s)))
			for b.Loop() {
				r.Redact(s)
			}
		})
	}
}

// FuzzStreamChunking cuts the fixture where the fuzzer says: whatever the
// cuts, no secret gets through the stream.
func FuzzStreamChunking(f *testing.F) {
	f.Add([]byte{1, 2, 3, 200, 7})
	f.Add([]byte{255, 1, 255, 1})
	r, _ := NewRedactor(nil, nil)
	text := fixture() + "\n" + fixture()
	f.Fuzz(func(t *testing.T, cuts []byte) {
		var got strings.Builder
		s := r.NewStream(func(_, chunk string) { got.WriteString(chunk) })
		at := 0
		for i := 0; at < len(text); i++ {
			n := 1
			if len(cuts) > 0 {
				n = int(cuts[i%len(cuts)]) + 1
			}
			end := min(at+n, len(text))
			s.Write("stdout", text[at:end])
			at = end
		}
		s.Flush()
		for _, secret := range fixtureSecrets() {
			if strings.Contains(got.String(), secret) {
				t.Fatalf("%q got through", secret)
			}
		}
	})
}

// FuzzASCIILower checks the copy-free lowering against the byte-by-byte
// definition: same length (offsets are shared with the original), ASCII
// letters lowered, every other byte (UTF-8 or not) unchanged.
func FuzzASCIILower(f *testing.F) {
	for _, s := range []string{"", "abc", "ABC", "Password=Hunter2", "ÄÖÜ AKIA", "\xff\xfeX", "x-API-KEY: Z"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := []byte(s)
		for i, c := range want {
			if 'A' <= c && c <= 'Z' {
				want[i] = c + 'a' - 'A'
			}
		}
		if got := asciiLower(s); got != string(want) {
			t.Fatalf("asciiLower(%q) = %q, want %q", s, got, want)
		}
	})
}
