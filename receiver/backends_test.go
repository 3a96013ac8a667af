package receiver_test

// The metadata selector tests open stores by URL; link in the backends.
import (
	_ "github.com/acemq/msgaudit/metadata/pgmeta"
	_ "github.com/acemq/msgaudit/metadata/redismeta"
	_ "github.com/acemq/msgaudit/metadata/sqlitemeta"
)
