package proxy

import (
	"slices"
	"testing"

	"github.com/fenceproxy/fenceproxy/catalog"
	"github.com/fenceproxy/fenceproxy/lease"
	"github.com/fenceproxy/fenceproxy/policy"
)

// Guard triggers with no protected table need no account and no check.
func TestDatabaseGuardWithoutTables(t *testing.T) {
	cfg, err := policy.Parse("g.yaml", []byte("listen: 127.0.0.1:0\nadmin: \"\"\nfencing:\n  database_guard: triggers\n"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New(cfg, cfg.Policy(1), Options{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer p.Shutdown(t.Context())
	if rt := p.rt.Load(); len(rt.unguarded) != 0 {
		t.Fatalf("unguarded: %v", rt.unguarded)
	}
}

// The catalog leaves out a protected table's current guard triggers only:
// one with another body, or another table's, is analysed like any trigger.
func TestWithoutGuardTriggers(t *testing.T) {
	pol, err := policy.NewPolicy(1, policy.Fencing{DatabaseGuard: policy.GuardTriggers}, []policy.Table{{Name: "app.t"}})
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for _, e := range []lease.Engine{lease.InnoDB, lease.Galera} {
		gs, err := lease.GuardTriggers(pol.GuardSpecs(e)[0])
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, gs[0].Body)
	}
	snap := &catalog.Snapshot{Triggers: []catalog.Trigger{
		{Schema: "app", Name: "fence_guard_v1_bi_x_t", Table: "t", Event: catalog.OpInsert, Body: bodies[0]},
		{Schema: "app", Name: "fence_guard_v1_bu_x_t", Table: "t", Event: catalog.OpUpdate, Body: bodies[1]},
		{Schema: "app", Name: "fence_guard_v1_bd_x_t", Table: "t", Event: catalog.OpDelete, Body: bodies[0] + " "},
		{Schema: "app", Name: "mine", Table: "t", Event: catalog.OpInsert, Body: bodies[0]},
		{Schema: "app", Name: "fence_guard_v1_bi_x_u", Table: "u", Event: catalog.OpInsert, Body: bodies[0]},
	}}
	out := withoutGuardTriggers(snap, pol)
	var kept []string
	for _, tr := range out.Triggers {
		kept = append(kept, tr.Name)
	}
	if want := []string{"fence_guard_v1_bd_x_t", "mine", "fence_guard_v1_bi_x_u"}; !slices.Equal(kept, want) {
		t.Fatalf("kept %v, want %v", kept, want)
	}
	if len(snap.Triggers) != 5 {
		t.Fatal("the snapshot itself was changed")
	}
}
