package catalog

import (
	"runtime"
	"strings"
	"testing"
)

// TestBodyBounds: a body or view definition past the catalog's bounds
// counts as writing (or being over) every protected table, and a statement
// of a body past the parse bounds is not parsed: every name it mentions
// counts as written.
func TestBodyBounds(t *testing.T) {
	rep := strings.Repeat
	long := "BEGIN UPDATE app.t SET n = 1; SELECT '" + rep("x", MaxBodyBytes) + "'; END"
	many := "BEGIN SELECT 1" + rep(",1", maxBodyTokens/2+1) + "; END"
	deep := "BEGIN UPDATE app.jobs SET n = " + rep("(", maxPieceNesting+1) + "1" + rep(")", maxPieceNesting+1) + "; END"
	wide := "BEGIN UPDATE app.jobs SET n = 1" + rep("+1", maxPieceTokens/2) + "; END"
	deeper := "BEGIN UPDATE app.jobs SET n = " + rep("(", maxBodyTokens/2-20) + "1" + rep(")", maxBodyTokens/2-20) + "; END"
	snap := &Snapshot{
		Routines: []Routine{
			{Schema: "app", Name: "long_p", Body: long},
			{Schema: "app", Name: "many_p", Body: many},
			{Schema: "app", Name: "deep_p", Body: deep},
			{Schema: "app", Name: "wide_f", Function: true, Body: wide},
			{Schema: "app", Name: "deeper_p", Body: deeper},
			{Schema: "app", Name: "small_p", Body: "BEGIN SELECT 1; END"},
		},
		Triggers: []Trigger{{Schema: "app", Name: "long_t", Table: "t", Event: OpInsert, Body: long}},
		Views: []View{
			{Schema: "app", Name: "long_v", Definition: "select `id` from `app`.`t` where '" + rep("x", MaxBodyBytes) + "'"},
			{Schema: "app", Name: "deep_v", Definition: "select " + rep("(", maxPieceNesting+1) + "1" + rep(")", maxPieceNesting+1) + " AS x from `app`.`ledger`"},
		},
	}
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	c := Close(snap, testProt)
	runtime.ReadMemStats(&b)
	// Lexing a body costs up to about 200 bytes a token (the token list as
	// it grows; three bodies here reach the token bound); parsing one would
	// cost the parser's hundreds more (deeper_p alone: about 40 MB).
	if got := b.TotalAlloc - a.TotalAlloc; got > 64<<20 {
		t.Errorf("Close allocated %d MiB", got>>20)
	}
	for _, k := range []string{"p:app.long_p", "p:app.many_p"} {
		r := c.Routines[k]
		if r == nil || !r.Oversize || !strings.Contains(r.Reason(), "longer than fenceproxy's catalog reads") {
			t.Errorf("%s: %+v, want refused as too long to read", k, r)
		}
	}
	for _, k := range []string{"p:app.deep_p", "f:app.wide_f", "p:app.deeper_p"} {
		if r := c.Routines[k]; r == nil || r.Oversize || r.Table != "app.jobs" {
			t.Errorf("%s: %+v, want refused for writing app.jobs (its statement not parsed, its names counted)", k, r)
		}
	}
	if r := c.Routines["p:app.small_p"]; r != nil {
		t.Errorf("small_p: %+v", r)
	}
	tf := c.Tables["app.t"]
	if tf == nil || tf.Refuse&OpInsert == 0 || !strings.Contains(tf.RefuseWhy, "longer than fenceproxy's catalog reads") {
		t.Errorf("app.t (trigger too long to read): %+v", tf)
	}
	lv := c.Tables["app.long_v"]
	if lv == nil || len(lv.Targets[0]) < 2 {
		t.Errorf("long_v (too long to read): %+v, want over every protected table", lv)
	}
	if dv := c.Tables["app.deep_v"]; dv == nil || len(dv.Targets[0]) == 0 || dv.Targets[0][0].Table != "ledger" {
		t.Errorf("deep_v (not parsed, its names counted): %+v", dv)
	}
}
