package approver

import (
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// TestSessionCookieSecureBehindTLSProxy: the session cookie is marked
// Secure when the approver sits behind a TLS-terminating proxy that says
// so (X-Forwarded-Proto or Forwarded, from a trusted peer), or when
// configured to always; not for plain requests, headers of an untrusted
// peer, or when configured never. Login and logout alike.
func TestSessionCookieSecureBehindTLSProxy(t *testing.T) {
	untrusted := []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")} // the test's peer is 127.0.0.1
	for _, c := range []struct {
		name    string
		mode    string
		proxies []netip.Prefix
		header  [2]string
		secure  bool
	}{
		{"plain request", "", nil, [2]string{}, false},
		{"X-Forwarded-Proto https", "", nil, [2]string{"X-Forwarded-Proto", "https"}, true},
		{"X-Forwarded-Proto list", "auto", nil, [2]string{"X-Forwarded-Proto", "HTTPS, http"}, true},
		{"X-Forwarded-Proto http", "auto", nil, [2]string{"X-Forwarded-Proto", "http"}, false},
		{"Forwarded proto=https", "auto", nil, [2]string{"Forwarded", `for=198.51.100.7;proto=https;host="approver.example.com"`}, true},
		{"Forwarded proto=http", "auto", nil, [2]string{"Forwarded", "for=198.51.100.7;proto=http"}, false},
		{"untrusted peer", "auto", untrusted, [2]string{"X-Forwarded-Proto", "https"}, false},
		{"always", SecureCookieAlways, nil, [2]string{}, true},
		{"never", SecureCookieNever, nil, [2]string{"X-Forwarded-Proto", "https"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := newStack(t, func(cfg *Config) { cfg.SecureCookie, cfg.TrustedProxies = c.mode, c.proxies })
			for _, path := range []string{"/login", "/logout"} {
				req, err := http.NewRequest("POST", st.http.URL+path, strings.NewReader(url.Values{"token": {alice}}.Encode()))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
				req.Header.Set("Origin", st.http.URL)
				if c.header[0] != "" {
					req.Header.Set(c.header[0], c.header[1])
				}
				res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				res.Body.Close()
				var found bool
				for _, ck := range res.Cookies() {
					if ck.Name == cookieName {
						found = true
						if ck.Secure != c.secure {
							t.Errorf("%s: session cookie Secure = %v, want %v (%s)", path, ck.Secure, c.secure, res.Header.Get("Set-Cookie"))
						}
					}
				}
				if !found {
					t.Fatalf("%s: no session cookie (status %d)", path, res.StatusCode)
				}
			}
		})
	}
}

func TestParseSecureCookieAndProxies(t *testing.T) {
	for _, v := range []string{"", "auto", "always", "never"} {
		if _, err := ParseSecureCookie(v); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
	if _, err := ParseSecureCookie("yes"); err == nil {
		t.Error("secure cookie yes: no error")
	}
	p, err := ParseProxies("10.1.2.3, 10.0.0.0/8,fd00::/8")
	if err != nil || len(p) != 3 || p[0].Bits() != 32 {
		t.Errorf("ParseProxies: %v %v", p, err)
	}
	if _, err := ParseProxies("10.0.0.300"); err == nil || !strings.Contains(err.Error(), "10.0.0.300") {
		t.Errorf("a bad address: %v", err)
	}
}
