package mysqlurl

import (
	"strings"
	"testing"
)

func TestConfig(t *testing.T) {
	for _, c := range []struct {
		raw              string
		ok               bool
		user, pass, addr string
		db               string
	}{
		{"mysql://root@127.0.0.1:3306/test", true, "root", "", "127.0.0.1:3306", "test"},
		{"mysql://app:p%40ss%3Aw@db/shop?timeout=2s", true, "app", "p@ss:w", "db:3306", "shop"},
		{"MYSQL://app@[::1]:3307/x", true, "app", "", "[::1]:3307", "x"},
		{"postgres://app@db/x", false, "", "", "", ""},
		{"mysql:///x", false, "", "", "", ""},
		{"mysql://app:Secret@db/x?timeout=notaduration", false, "", "", "", ""},
		{"mysql://app:Secret@db:%zz/x", false, "", "", "", ""},
	} {
		cfg, err := Config(c.raw)
		if (err == nil) != c.ok {
			t.Errorf("Config(%q) error %v; want ok=%v", c.raw, err, c.ok)
			continue
		}
		if err != nil {
			if strings.Contains(err.Error(), "Secret") {
				t.Errorf("Config(%q) error shows the password: %v", c.raw, err)
			}
			continue
		}
		if cfg.User != c.user || cfg.Passwd != c.pass || cfg.Addr != c.addr || cfg.DBName != c.db || cfg.Net != "tcp" {
			t.Errorf("Config(%q) = user %q pass %q addr %q db %q net %q", c.raw, cfg.User, cfg.Passwd, cfg.Addr, cfg.DBName, cfg.Net)
		}
	}
}

func FuzzConfig(f *testing.F) {
	f.Add("mysql://root@127.0.0.1:3306/test")
	f.Add("mysql://a:Secret@h/d?tls=true")
	f.Fuzz(func(t *testing.T, raw string) {
		cfg, err := Config(raw)
		if err != nil && strings.Contains(raw, "Secret") && strings.Contains(err.Error(), "Secret") {
			t.Fatalf("error quotes the URL: %v", err)
		}
		if err == nil && cfg.Net != "tcp" {
			t.Fatalf("Config(%q).Net = %q", raw, cfg.Net)
		}
	})
}
