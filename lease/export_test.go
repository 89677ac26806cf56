package lease

import "testing"

// SetMigrateAsMySQL makes CreateSchema migrate the audit table the way it
// does on MySQL (no ADD COLUMN IF NOT EXISTS) until the test ends.
func SetMigrateAsMySQL(t *testing.T, on bool) {
	migrateAsMySQL = on
	t.Cleanup(func() { migrateAsMySQL = false })
}
