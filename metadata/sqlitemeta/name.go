package sqlitemeta

import "regexp"

// tableName accepts a plain or schema-qualified SQL identifier.
var tableName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)
