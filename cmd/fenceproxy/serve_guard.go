package main

import (
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/proxy"
)

// checkGuardConnect is check-config --connect's part on
// fencing.database_guard: the guard triggers serve checks at start (the
// proxy's own account reads them), and TiDB, which has none.
func checkGuardConnect(cfg *policy.Config) []error {
	if cfg.Fencing.DatabaseGuard != policy.GuardTriggers || len(cfg.Tables) == 0 {
		return nil
	}
	db, err := proxy.OpenAdminDB(cfg.Backend)
	if err != nil || db == nil {
		return nil // checkBackend reported it
	}
	defer db.Close()
	if err := proxy.CheckDatabaseGuard(cfg, db); err != nil {
		return []error{err}
	}
	return nil
}
