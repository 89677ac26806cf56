package policy

import (
	"strings"
	"testing"
)

const templateBackend = "backend:\n  address: 127.0.0.1:3306\n  user: fp\n  password_env: FP_PW\n"

// TestLeaseTemplateErrors: each broken template is reported at its line
// and column, with what is wrong.
func TestLeaseTemplateErrors(t *testing.T) {
	tests := []struct{ name, lease, want string }{
		{"unclosed brace", `"invoice:{customer_id"`, `"invoice:{customer_id": unbalanced braces: '{' at byte 8 has no '}'`},
		{"stray closing brace", `"invoice:customer_id}"`, `"invoice:customer_id}": unbalanced braces: '}' at byte 19 has no '{'`},
		{"nested brace", `"invoice:{a{b}"`, `"invoice:{a{b}": unbalanced braces: '{' inside {...} at byte 8`},
		{"empty column", `"invoice:{}"`, `"invoice:{}": empty column name {} at byte 8`},
		{"column with a dash", `"invoice:{customer-id}"`, `"invoice:{customer-id}": column {customer-id}: a template column is 1 to 64 characters of A-Z a-z 0-9 _ $`},
		{"quote in the text", `"it's:{id}"`, `"it's:{id}": the literal text of a lease template may contain only printable ASCII without ' " \ ` + "`" + ` or ?`},
		{"too long", `"` + strings.Repeat("x", 190) + `{id}"`, `a lease template has at most 191 bytes`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			yml := templateBackend + "tables:\n  - name: app.invoices\n    lease: " + tt.lease + "\n"
			_, err := Parse("f.yaml", []byte(yml))
			if err == nil {
				t.Fatalf("accepted:\n%s", yml)
			}
			if got, want := err.Error(), "f.yaml:7:12: tables[0].lease: "+tt.want; got != want {
				t.Errorf("\n got: %s\nwant: %s", got, want)
			}
		})
	}
}

// TestLeaseTemplateNeeds: a template needs the proxy's account (its
// columns are checked at start) and no guard triggers.
func TestLeaseTemplateNeeds(t *testing.T) {
	yml := "backend:\n  address: 127.0.0.1:3306\ncatalog:\n  refresh: 0s\ntables:\n  - name: app.invoices\n    lease: \"invoice:{customer_id}\"\n"
	_, err := Parse("f.yaml", []byte(yml))
	if err == nil || !strings.Contains(err.Error(), "f.yaml:7:12: tables[0].lease: a lease template needs backend.user") {
		t.Fatalf("without backend.user: %v", err)
	}
	yml = templateBackend + "fencing:\n  database_guard: triggers\ntables:\n  - name: app.invoices\n    lease: \"invoice:{customer_id}\"\n"
	_, err = Parse("f.yaml", []byte(yml))
	if err == nil || !strings.Contains(err.Error(), "tables[0].lease: the guard triggers (fencing.database_guard: triggers) check fixed leases") {
		t.Fatalf("with guard triggers: %v", err)
	}
}

// TestLeaseTemplateParsed: the policy carries the parsed template; a
// fixed lease has none.
func TestLeaseTemplateParsed(t *testing.T) {
	yml := templateBackend + "tables:\n  - name: app.orders\n    lease: \"order:{region}/{cust_no}:{region}\"\n  - name: app.runs\n    lease: admin:runs\n"
	c, err := Parse("f.yaml", []byte(yml))
	if err != nil {
		t.Fatal(err)
	}
	p := c.Policy(1)
	o, _ := p.Lookup("app", "orders")
	if o.Template == nil {
		t.Fatal("no template")
	}
	var parts []string
	for _, pt := range o.Template.Parts {
		if pt.Column != "" {
			parts = append(parts, "{"+pt.Column+"}")
		} else {
			parts = append(parts, pt.Lit)
		}
	}
	if got := strings.Join(parts, "|"); got != "order:|{region}|/|{cust_no}|:|{region}" {
		t.Errorf("parts %s", got)
	}
	if got := strings.Join(o.Template.Columns(), ","); got != "region,cust_no" {
		t.Errorf("columns %s", got)
	}
	if !o.Template.HasColumn("CUST_NO") || o.Template.HasColumn("order") {
		t.Error("HasColumn")
	}
	// The policy shares the config's template: what the start-up check
	// finds reaches the rewriter.
	c.Tables[0].Template.SetSchema(&TemplateSchema{KeysCovered: true})
	if o.Template.Schema() == nil || !c.Policy(2).Tables[0].Template.Schema().KeysCovered {
		t.Error("the policy does not see the checked schema")
	}
	if r, _ := p.Lookup("app", "runs"); r.Template != nil || r.Lease != "admin:runs" {
		t.Errorf("fixed lease: %+v", r)
	}
}
