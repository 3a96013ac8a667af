// Package mysqlurl turns the mysql:// URLs the MySQL backends accept into
// go-sql-driver/mysql configurations.
package mysqlurl

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"
)

// Config parses mysql://[user[:password]@]host[:port]/database[?params]
// (port 3306 when missing); params are the driver's DSN parameters. Its
// errors never quote the URL.
func Config(raw string) (*mysql.Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, errors.New("cannot parse the URL")
	}
	if !strings.EqualFold(u.Scheme, "mysql") {
		return nil, fmt.Errorf("scheme %q, want mysql", u.Scheme)
	}
	if u.Host == "" {
		return nil, errors.New("no host")
	}
	host := u.Host
	if u.Port() == "" {
		host += ":3306"
	}
	dsn := "tcp(" + host + ")/" + strings.TrimPrefix(u.Path, "/")
	if u.User != nil {
		cred := u.User.Username()
		if p, ok := u.User.Password(); ok {
			cred += ":" + p
		}
		dsn = cred + "@" + dsn
	}
	if u.RawQuery != "" {
		dsn += "?" + u.RawQuery
	}
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		return nil, errors.New("the driver refuses the URL's parameters")
	}
	return cfg, nil
}
