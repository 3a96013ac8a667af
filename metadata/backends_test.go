package metadata_test

// The tests open stores by URL; link in every backend.
import (
	_ "github.com/acemq/msgaudit/metadata/pgmeta"
	_ "github.com/acemq/msgaudit/metadata/redismeta"
	_ "github.com/acemq/msgaudit/metadata/sqlitemeta"
)
