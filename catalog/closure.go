package catalog

import (
	"sort"
	"strings"
)

// The closure: from the protected tables, every object whose use writes one
// of them.
//
//   - A view (transitively, view of view) writes what its definition names:
//     INSERT/UPDATE/DELETE through it are fenced with those tables' leases.
//   - A table whose triggers write a protected table (through trigger chains,
//     views and called routines) is fenced for the operations that fire them.
//   - A parent table whose foreign keys CASCADE / SET NULL / SET DEFAULT into
//     a protected table is fenced for DELETE and UPDATE. Cascaded changes do
//     not fire triggers (MySQL and MariaDB), so only cascades chain on.
//   - A routine whose body writes a protected table (transitively; dynamic
//     SQL or a body the catalog account cannot see counts as writing
//     everything) is refused wherever it is called.
//   - An event that writes a protected table cannot be fenced: reported.
//   - A protected table whose triggers or cascades reach other protected
//     tables is listed too, with those others: its writes need their
//     leases as well as its own.
//   - A MERGE table writes the tables of its UNION list: fenced like a
//     view over them (engine.go).
//   - A table whose engine forwards its rows (FEDERATED, CONNECT, SPIDER,
//     or an engine this code does not know) cannot be fenced: every write
//     to it is refused, and so is every write that reaches it (through a
//     view, a trigger, a routine). Such tables take part in the closure as
//     protected tables of their own (after the policy's), which never
//     become targets.
//
// An object reaching a lease table cannot be fenced at all (a worker with
// any valid lease could forge another's): its writes are refused.

// Protected is one table the policy protects (or a lease table).
type Protected struct {
	Schema, Table string
	Lease         string // fixed lease; "" = the session's lease variable
	LeaseTable    bool
}

// Target is a protected table a derived write reaches, with its lease.
type Target struct {
	Schema, Table, Lease string
}

// Kind says why a table or view is fenced.
type Kind uint8

const (
	KindView     Kind = 1 << iota // a view over protected tables
	KindTriggers                  // its triggers write protected tables
	KindCascade                   // its foreign key rules change protected tables
	KindMerge                     // a MERGE table over protected tables
	KindForward                   // its engine forwards its rows elsewhere: writes refused
)

func (k Kind) String() string {
	var parts []string
	if k&KindView != 0 {
		parts = append(parts, "view")
	}
	if k&KindTriggers != 0 {
		parts = append(parts, "triggers")
	}
	if k&KindCascade != 0 {
		parts = append(parts, "cascade")
	}
	if k&KindMerge != 0 {
		parts = append(parts, "merge")
	}
	if k&KindForward != 0 {
		parts = append(parts, "forward")
	}
	return strings.Join(parts, "+")
}

// Fenced is a table or view whose writes reach protected tables.
type Fenced struct {
	Schema, Name string
	Kind         Kind
	// Targets by operation (opIndex): the protected tables an INSERT, UPDATE
	// or DELETE of a row of this object reaches.
	Targets [3][]Target
	// Refuse: the operations that reach a lease table (or a body the catalog
	// account cannot see that may): refused, with RefuseWhy.
	Refuse    Op
	RefuseWhy string
	// ReadRefuse: reading the view calls a refused function (the
	// function's name); any statement naming the view is refused.
	ReadRefuse string
	// Engine: the table's own engine forwards its rows (KindForward); its
	// writes are all refused.
	Engine string
	Why    []string // how it reaches them, one line per path, sorted
}

// Ops returns the operations that reach a protected table.
func (f *Fenced) Ops() Op {
	var o Op
	for i := range f.Targets {
		if len(f.Targets[i]) > 0 {
			o |= opOf(i)
		}
	}
	return o
}

// For returns the targets of a statement performing ops, deduplicated, in
// policy order.
func (f *Fenced) For(ops Op) []Target {
	var out []Target
	for i := range f.Targets {
		if ops&opOf(i) == 0 {
			continue
		}
		for _, t := range f.Targets[i] {
			dup := false
			for _, x := range out {
				if x == t {
					dup = true
				}
			}
			if !dup {
				out = append(out, t)
			}
		}
	}
	return out
}

// Refused is a routine whose body writes a protected table.
type Refused struct {
	Schema, Name string
	Function     bool
	Table        string // schema.table: the first protected table it writes
	Dynamic      bool   // its body (or a routine it calls) runs dynamic SQL
	Hidden       bool   // the catalog account cannot see its body (or a callee's)
	Oversize     bool   // its own body is too long for the catalog to read (MaxBodyBytes)
	Unclear      string // its own body may read in more than one way to the server: why
	Engine       string // Table is not protected but forwards its rows (this engine)
}

// Reason is the refusal's sentence.
func (r *Refused) Reason() string {
	what := "procedure"
	if r.Function {
		what = "function"
	}
	name := r.Schema + "." + r.Name
	switch {
	case r.Oversize:
		return "the " + what + " " + name + " may write protected tables: its body is longer than fenceproxy's catalog reads " +
			"(1 MiB, 100,000 tokens), so it counts as writing every one; write the tables directly"
	case r.Unclear != "":
		return "the " + what + " " + name + " may write protected tables: fenceproxy cannot be sure how the server reads " +
			"its body (" + r.Unclear + "), so it counts as writing every one; write the tables directly"
	case r.Hidden:
		return "the " + what + " " + name + " may write protected tables: fenceproxy's catalog account cannot see its body " +
			"(or a routine it calls); grant it the privileges to read routine bodies, or write the tables directly"
	case r.Dynamic:
		return "the " + what + " " + name + " runs dynamic SQL (PREPARE/EXECUTE), which may write any protected table " +
			"(" + r.Table + " among them) without a fence; write the tables directly"
	case r.Engine != "":
		return "the " + what + " " + name + " writes the table " + r.Table + " (ENGINE=" + r.Engine + "), whose engine " +
			"writes its rows over a connection of its own that fenceproxy cannot fence; write the remote table directly instead"
	}
	return "the " + what + " " + name + " writes the protected table " + r.Table +
		" without a fence; write the table directly (fenced) instead"
}

// EventReport is an event that writes protected tables: fencing cannot
// reach it.
type EventReport struct {
	Schema, Name string
	Table        string // first protected table it writes
	Dynamic      bool
	Hidden       bool
}

// Closure is the derived objects of one Snapshot under one set of
// protected tables. It is not modified after Close returns.
type Closure struct {
	Tables   map[string]*Fenced  // key(schema, name): fenced tables and views
	Routines map[string]*Refused // key(schema, name) prefixed "p:" or "f:"
	Events   []EventReport
	// Dynamic: routines whose own body runs dynamic SQL (whether or not
	// refused for it), schema.name sorted.
	Dynamic []string
	// Hidden: objects whose body the catalog account cannot see.
	Hidden []string

	known map[string]bool // Snapshot.Tables
	// functions: every stored function of the snapshot, writer or not
	// (key(schema, name)); udfs: every loadable function (lower case).
	// While the catalog cannot be read, a call of any other function that
	// is not a built-in one is refused: it may have been created since.
	functions, udfs map[string]bool
	// procedures: every stored procedure of the snapshot (key(schema,
	// name)).
	procedures map[string]bool
	// tableKeys, routineKeys: the keys of Tables and Routines, sorted, and
	// those of them that are not ASCII: the lookups' fallback (SameName).
	tableKeys, routineKeys, wildTables, wildRoutines []string
}

// lookupKey finds the key of m that the server may take k for: k itself,
// else (SameName) any key when k is not ASCII, else a key that is not.
func lookupKey[V any](m map[string]V, k string, all, wild []string) (V, bool) {
	if v, ok := m[k]; ok {
		return v, true
	}
	keys := wild
	if !isASCII(k) {
		keys = all
	}
	for _, x := range keys {
		if SameName(x, k) {
			return m[x], true
		}
	}
	var zero V
	return zero, false
}

func sortedKeys[V any](m map[string]V) (all, wild []string) {
	for k := range m {
		all = append(all, k)
		if !isASCII(k) {
			wild = append(wild, k)
		}
	}
	sort.Strings(all)
	sort.Strings(wild)
	return all, wild
}

// Known reports whether the snapshot saw the table or view schema.name.
func (c *Closure) Known(schema, name string) bool {
	return c != nil && c.known[key(schema, name)]
}

// KnownFunction reports whether the snapshot saw the stored function
// schema.name (whatever it writes). The names compare exactly, case aside:
// the server's looser comparison (SameName) would let a new function pass
// for a known one.
func (c *Closure) KnownFunction(schema, name string) bool {
	return c != nil && c.functions[key(schema, name)]
}

// KnownProcedure reports whether the snapshot saw the stored procedure
// schema.name (whatever it writes).
func (c *Closure) KnownProcedure(schema, name string) bool {
	return c != nil && c.procedures[key(schema, name)]
}

// ObjectNames returns the lower-case names, without their schemas, of
// every table, view, stored routine and loadable function the snapshot
// saw: a name outside them is an object the snapshot never saw (or no
// object at all).
func (c *Closure) ObjectNames() []string {
	if c == nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	add := func(k string) {
		if i := strings.IndexByte(k, '.'); i >= 0 {
			k = k[i+1:]
		}
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	for _, m := range []map[string]bool{c.known, c.functions, c.procedures} {
		for k := range m {
			add(k)
		}
	}
	for k := range c.udfs {
		add(k)
	}
	sort.Strings(out)
	return out
}

// KnownUDF reports whether the snapshot saw the loadable function name.
func (c *Closure) KnownUDF(name string) bool {
	return c != nil && c.udfs[strings.ToLower(name)]
}

// Table returns the fenced table or view schema.name, or nil.
func (c *Closure) Table(schema, name string) *Fenced {
	if c == nil {
		return nil
	}
	f, _ := lookupKey(c.Tables, key(schema, name), c.tableKeys, c.wildTables)
	return f
}

// Procedure returns the refused procedure schema.name, or nil.
func (c *Closure) Procedure(schema, name string) *Refused {
	if c == nil {
		return nil
	}
	r, _ := lookupKey(c.Routines, "p:"+key(schema, name), c.routineKeys, c.wildRoutines)
	return r
}

// Function returns the refused function schema.name, or nil.
func (c *Closure) Function(schema, name string) *Refused {
	if c == nil {
		return nil
	}
	r, _ := lookupKey(c.Routines, "f:"+key(schema, name), c.routineKeys, c.wildRoutines)
	return r
}

// Names returns the lower-cased unqualified names of every derived object,
// sorted and unique: the words whose absence from a statement lets it skip
// the catalog.
func (c *Closure) Names() []string {
	if c == nil {
		return nil
	}
	seen := map[string]bool{}
	for _, f := range c.Tables {
		seen[strings.ToLower(f.Name)] = true
	}
	for _, r := range c.Routines {
		seen[strings.ToLower(r.Name)] = true
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func opOf(i int) Op { return Op(1) << i }

// set is a set of protected-table indices.
type set map[int]struct{}

func (s set) addAll(o set) {
	for k := range o {
		s[k] = struct{}{}
	}
}

type trig struct {
	t  *Trigger
	fx effects
}

type closer struct {
	prot  []Protected
	byKey map[string]int
	// fwd: tables whose engine forwards rows, by key: their index in prot
	// (past the policy's); engine[i] is that index's engine.
	fwd    map[string]int
	engine map[int]string
	merges map[string]bool // MERGE tables (in views, with their UNION lists)
	all    set
	views  map[string][]ref // view key -> bases
	vfuncs map[string][]ref
	// vpkgs: the packages a view's definition may call a routine of.
	vpkgs  map[string][]ref
	vnames map[string]*View
	trigs  map[string][]trig       // table key -> its triggers
	fks    map[string][]ForeignKey // parent key -> foreign keys into children
	rtns   map[string]*Routine     // "p:"/"f:" key
	rfx    map[string]effects
	rnames map[string]string // see routine
	rkeys  []string
	rwild  []string

	full    map[string]*[3]set // what writing a row of the object reaches
	cascade map[string]*[3]set // what the server's cascades from it reach
	reach   map[string]set     // routine -> what calling it reaches
}

// Close computes the closure of snap over the protected tables.
func Close(snap *Snapshot, prot []Protected) *Closure {
	c := &closer{
		prot:    append([]Protected(nil), prot...),
		byKey:   map[string]int{},
		fwd:     map[string]int{},
		engine:  map[int]string{},
		merges:  map[string]bool{},
		all:     set{},
		views:   map[string][]ref{},
		vfuncs:  map[string][]ref{},
		vpkgs:   map[string][]ref{},
		vnames:  map[string]*View{},
		trigs:   map[string][]trig{},
		fks:     map[string][]ForeignKey{},
		rtns:    map[string]*Routine{},
		rfx:     map[string]effects{},
		rnames:  map[string]string{},
		full:    map[string]*[3]set{},
		cascade: map[string]*[3]set{},
		reach:   map[string]set{},
	}
	for i, p := range prot {
		c.byKey[key(p.Schema, p.Table)] = i
		c.all[i] = struct{}{}
	}
	if snap == nil {
		snap = &Snapshot{}
	}
	for _, te := range snap.Engines {
		k := key(te.Schema, te.Name)
		class := ClassOf(te.Engine)
		if class == EngineMerge && te.UnionUnknown {
			class = EngineUnknown
		}
		switch class {
		case EngineMerge:
			var bases []ref
			for _, u := range te.Union {
				bases = append(bases, ref{u.Schema, u.Name})
			}
			c.views[k] = bases
			c.merges[k] = true
		case EngineForward, EngineUnknown:
			if _, dup := c.fwd[k]; dup {
				continue
			}
			i := len(c.prot)
			c.prot = append(c.prot, Protected{Schema: te.Schema, Table: te.Name})
			c.fwd[k] = i
			c.engine[i] = te.Engine
			c.all[i] = struct{}{}
		}
	}
	for i := range snap.Views {
		v := &snap.Views[i]
		k := key(v.Schema, v.Name)
		bases, funcs, ok := viewBases(*v, snap.readMode(""))
		if !ok {
			// Too long or unclear to read: it may be over any table.
			for _, p := range c.prot {
				bases = append(bases, ref{p.Schema, p.Table})
			}
		}
		c.views[k], c.vfuncs[k] = bases, funcs
		c.vpkgs[k] = viewPackages(*v, snap.readMode(""))
		c.vnames[k] = v
	}
	for i := range snap.Triggers {
		t := &snap.Triggers[i]
		k := key(t.Schema, t.Table)
		c.trigs[k] = append(c.trigs[k], trig{t, analyzeBody(t.Body, t.Schema, snap.readMode(t.SQLMode))})
	}
	for _, fk := range snap.ForeignKeys {
		k := key(fk.RefSchema, fk.RefTable)
		c.fks[k] = append(c.fks[k], fk)
	}
	for i := range snap.Routines {
		r := &snap.Routines[i]
		k := routineKey(r.Function, r.Schema, r.Name)
		c.rtns[k] = r
		c.rfx[k] = analyzeBody(r.Body, r.Schema, snap.readMode(r.SQLMode))
	}
	c.fixpoint()
	return c.result(snap)
}

func routineKey(function bool, schema, name string) string {
	if function {
		return "f:" + key(schema, name)
	}
	return "p:" + key(schema, name)
}

// objects lists every key that may reach something besides the protected
// tables themselves.
func (c *closer) objects() []string {
	seen := map[string]bool{}
	var out []string
	add := func(k string) {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	for k := range c.views {
		add(k)
	}
	for k := range c.trigs {
		add(k)
	}
	for k := range c.fks {
		add(k)
	}
	for k := range c.fwd {
		add(k)
	}
	sort.Strings(out)
	return out
}

func (c *closer) fullOf(k string, op int) set {
	if s := c.full[k]; s != nil {
		return s[op]
	}
	return nil
}

// protectedOf: the protected table k itself, if it is one.
func (c *closer) protectedOf(k string) set {
	i, ok := c.byKey[k]
	j, fwd := c.fwd[k]
	switch {
	case ok && fwd:
		return set{i: {}, j: {}}
	case ok:
		return set{i: {}}
	case fwd:
		return set{j: {}}
	}
	return nil
}

// fixpoint grows every reach set until nothing changes: the sets only grow
// and are bounded, so it ends; cycles (recursive triggers or routines)
// are harmless.
func (c *closer) fixpoint() {
	objs := c.objects()
	rkeys := make([]string, 0, len(c.rtns))
	for k := range c.rtns {
		rkeys = append(rkeys, k)
	}
	sort.Strings(rkeys)
	for changed := true; changed; {
		changed = false
		for _, k := range objs {
			for op := 0; op < 3; op++ {
				cs := c.evalCascade(k, op)
				fs := c.evalFull(k, op)
				fs.addAll(cs)
				if grow(c.cascade, k, op, cs) {
					changed = true
				}
				if grow(c.full, k, op, fs) {
					changed = true
				}
			}
		}
		for _, k := range rkeys {
			s := c.evalEffects(c.rfx[k])
			if len(s) > len(c.reach[k]) {
				c.reach[k] = s
				changed = true
			}
		}
	}
}

func grow(m map[string]*[3]set, k string, op int, s set) bool {
	cur := m[k]
	if cur == nil {
		cur = &[3]set{}
		m[k] = cur
	}
	if len(s) > len(cur[op]) {
		cur[op] = s
		return true
	}
	return false
}

// reachOf: what writing object k with op reaches now.
func (c *closer) reachOf(k string, op int) set {
	s := set{}
	s.addAll(c.protectedOf(k))
	s.addAll(c.fullOf(k, op))
	return s
}

func (c *closer) evalFull(k string, op int) set {
	s := set{}
	for _, b := range c.views[k] {
		s.addAll(c.reachOf(b.key(), op))
	}
	for _, t := range c.trigs[k] {
		if t.t.Event&opOf(op) != 0 {
			s.addAll(c.evalEffects(t.fx))
		}
	}
	return s
}

// evalCascade: what the foreign keys whose parent is k change when a row
// of k is written with op, through the children's own cascades.
func (c *closer) evalCascade(k string, op int) set {
	s := set{}
	for _, fk := range c.fks[k] {
		var rule string
		switch opOf(op) {
		case OpDelete:
			rule = fk.OnDelete
		case OpUpdate:
			rule = fk.OnUpdate
		default:
			continue
		}
		child := key(fk.Schema, fk.Table)
		var childOp int
		switch strings.ToUpper(rule) {
		case "CASCADE":
			childOp = op
		case "SET NULL", "SET DEFAULT":
			childOp = 1 // an UPDATE of the child rows
		default:
			continue
		}
		s.addAll(c.protectedOf(child))
		if cs := c.cascade[child]; cs != nil {
			s.addAll(cs[childOp])
		}
	}
	return s
}

// routine returns the key of the routine a call of k reaches: k itself,
// or the routine the server may take it for (SameName), or k when none.
func (c *closer) routine(k string) string {
	if _, ok := c.rtns[k]; ok {
		return k
	}
	if r, ok := c.rnames[k]; ok {
		return r
	}
	r := k
	if c.rkeys == nil {
		c.rkeys, c.rwild = sortedKeys(c.rtns)
	}
	keys := c.rwild
	if !isASCII(k) {
		keys = c.rkeys
	}
	for _, x := range keys {
		if SameName(x, k) {
			r = x
			break
		}
	}
	c.rnames[k] = r
	return r
}

func (c *closer) evalEffects(fx effects) set {
	if fx.dynamic || fx.hidden {
		return c.all
	}
	s := set{}
	for _, w := range fx.writes {
		for op := 0; op < 3; op++ {
			if w.ops&opOf(op) != 0 {
				s.addAll(c.reachOf(w.ref.key(), op))
			}
		}
	}
	for _, r := range fx.calls {
		s.addAll(c.reach[c.routine("p:"+r.key())])
	}
	for _, r := range fx.funcs {
		s.addAll(c.reach[c.routine("f:"+r.key())])
	}
	return s
}

// flags reports whether running fx may run dynamic SQL or a body the
// catalog cannot see, through its callees.
func (c *closer) flags(fx effects, seen map[string]bool) (dynamic, hidden bool) {
	dynamic, hidden = fx.dynamic, fx.hidden
	visit := func(k string) {
		if seen[k] || c.rtns[k] == nil {
			return
		}
		seen[k] = true
		d, h := c.flags(c.rfx[k], seen)
		dynamic = dynamic || d
		hidden = hidden || h
	}
	for _, r := range fx.calls {
		visit(c.routine("p:" + r.key()))
	}
	for _, r := range fx.funcs {
		visit(c.routine("f:" + r.key()))
	}
	return dynamic, hidden
}

func (c *closer) targets(s set) []Target {
	idx := make([]int, 0, len(s))
	for i := range s {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	out := make([]Target, 0, len(idx))
	for _, i := range idx {
		p := c.prot[i]
		out = append(out, Target{Schema: p.Schema, Table: p.Table, Lease: p.Lease})
	}
	return out
}

// fenceTargets: the targets of s a fence can hold, without the tables
// whose engine forwards rows.
func (c *closer) fenceTargets(s set) []Target {
	keep := set{}
	for i := range s {
		if _, fwd := c.engine[i]; !fwd {
			keep[i] = struct{}{}
		}
	}
	return c.targets(keep)
}

// forwardIn returns the first table of s whose engine forwards rows, and
// its engine.
func (c *closer) forwardIn(s set) (string, string) {
	best := -1
	for i := range s {
		if _, fwd := c.engine[i]; fwd && (best < 0 || i < best) {
			best = i
		}
	}
	if best < 0 {
		return "", ""
	}
	return c.prot[best].Schema + "." + c.prot[best].Table, c.engine[best]
}

func (c *closer) first(s set) string {
	t := c.targets(s)
	if len(t) == 0 {
		return ""
	}
	return t[0].Schema + "." + t[0].Table
}

func (c *closer) leaseIn(s set) string {
	idx := make([]int, 0, len(s))
	for i := range s {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		if p := c.prot[i]; p.LeaseTable {
			return p.Schema + "." + p.Table
		}
	}
	return ""
}

func (c *closer) result(snap *Snapshot) *Closure {
	out := &Closure{Tables: map[string]*Fenced{}, Routines: map[string]*Refused{}, known: map[string]bool{},
		functions: map[string]bool{}, udfs: map[string]bool{}, procedures: map[string]bool{}}
	for _, t := range snap.Tables {
		out.known[key(t.Schema, t.Name)] = true
	}
	for _, r := range snap.Routines {
		if r.Function {
			out.functions[key(r.Schema, r.Name)] = true
		} else {
			out.procedures[key(r.Schema, r.Name)] = true
		}
	}
	for _, u := range snap.UDFs {
		out.udfs[strings.ToLower(u)] = true
	}
	names := map[string]ref{}
	for _, v := range snap.Views {
		names[key(v.Schema, v.Name)] = ref{v.Schema, v.Name}
	}
	for _, t := range snap.Triggers {
		names[key(t.Schema, t.Table)] = ref{t.Schema, t.Table}
	}
	for _, fk := range snap.ForeignKeys {
		names[key(fk.RefSchema, fk.RefTable)] = ref{fk.RefSchema, fk.RefTable}
	}
	for _, te := range snap.Engines {
		names[key(te.Schema, te.Name)] = ref{te.Schema, te.Name}
	}
	for _, k := range c.objects() {
		fs := c.full[k]
		if i, prot := c.byKey[k]; prot && fs != nil {
			// A write to a protected table is fenced with its own lease
			// by the rewriter; its triggers and cascades may reach other
			// protected tables (another lease, the lease table): those
			// are the closure's.
			var others [3]set
			for op := 0; op < 3; op++ {
				others[op] = set{}
				for j := range fs[op] {
					if j != i {
						others[op][j] = struct{}{}
					}
				}
			}
			fs = &others
		}
		j, fwd := c.fwd[k]
		if fwd && fs != nil {
			// The table's own index is no target of its own.
			var others [3]set
			for op := 0; op < 3; op++ {
				others[op] = set{}
				for x := range fs[op] {
					if x != j {
						others[op][x] = struct{}{}
					}
				}
			}
			fs = &others
		}
		if !fwd && (fs == nil || len(fs[0])+len(fs[1])+len(fs[2]) == 0) {
			continue
		}
		if fs == nil {
			fs = &[3]set{{}, {}, {}}
		}
		n := names[k]
		f := &Fenced{Schema: n.schema, Name: n.name}
		for op := 0; op < 3; op++ {
			f.Targets[op] = c.fenceTargets(fs[op])
			if lt := c.leaseIn(fs[op]); lt != "" {
				f.Refuse |= opOf(op)
				f.RefuseWhy = "a write to it may change the lease table " + lt +
					" (through triggers, views or routines), which only fenceproxy's lease functions may change"
			} else if ft, eng := c.forwardIn(fs[op]); ft != "" {
				f.Refuse |= opOf(op)
				f.RefuseWhy = "a write to it reaches the table " + ft + " (through views, triggers or routines), " +
					"whose ENGINE=" + eng + " writes its rows over a connection of its own that fenceproxy cannot fence; " +
					"write the tables directly instead"
			}
		}
		f.Why, f.Kind = c.why(k, fs)
		if f.Kind&KindTriggers != 0 {
			for _, t := range c.trigs[k] {
				if t.fx.hidden && t.t.Event&f.Ops() != 0 {
					f.Refuse |= t.t.Event
					f.RefuseWhy = "fenceproxy's catalog account cannot see the body of its trigger " + t.t.Name +
						"; grant it the TRIGGER privilege on the table, or write the tables directly"
					if t.fx.oversize {
						f.RefuseWhy = "the body of its trigger " + t.t.Name + " is longer than fenceproxy's catalog reads " +
							"(1 MiB, 100,000 tokens), so it counts as writing every protected table; write the tables directly"
					} else if t.fx.unclear != "" {
						f.RefuseWhy = "fenceproxy cannot be sure how the server reads the body of its trigger " + t.t.Name +
							" (" + t.fx.unclear + "), so it counts as writing every protected table; write the tables directly"
					}
				}
			}
		}
		if fwd {
			f.Engine = c.engine[j]
			f.Kind |= KindForward
			f.Refuse = OpAll
			f.RefuseWhy = forwardWhy(n.schema, n.name, f.Engine)
			f.Why = append(f.Why, "ENGINE="+f.Engine+": its rows are written over a connection of its own")
			sort.Strings(f.Why)
		}
		out.Tables[k] = f
	}
	for k, r := range c.rtns {
		s := c.reach[k]
		fx := c.rfx[k]
		if fx.dynamic {
			out.Dynamic = append(out.Dynamic, r.Schema+"."+r.Name)
		}
		if fx.oversize {
			out.Hidden = append(out.Hidden, kindWord(r)+" "+r.Schema+"."+r.Name+" (body too long to read)")
		} else if fx.unclear != "" {
			out.Hidden = append(out.Hidden, kindWord(r)+" "+r.Schema+"."+r.Name+" (body unclear: "+fx.unclear+")")
		} else if fx.hidden {
			out.Hidden = append(out.Hidden, kindWord(r)+" "+r.Schema+"."+r.Name)
		}
		if len(s) == 0 {
			continue
		}
		d, h := c.flags(fx, map[string]bool{k: true})
		rf := &Refused{Schema: r.Schema, Name: r.Name, Function: r.Function, Table: c.first(s), Dynamic: d, Hidden: h,
			Oversize: fx.oversize, Unclear: fx.unclear}
		if len(c.fenceTargets(s)) == 0 {
			rf.Table, rf.Engine = c.forwardIn(s)
		}
		out.Routines[k] = rf
	}
	for _, t := range snap.Triggers {
		if t.Body == "" {
			out.Hidden = append(out.Hidden, "trigger "+t.Schema+"."+t.Name)
		}
	}
	for _, ev := range snap.Events {
		fx := analyzeBody(ev.Body, ev.Schema, snap.readMode(ev.SQLMode))
		if ev.Body == "" {
			out.Hidden = append(out.Hidden, "event "+ev.Schema+"."+ev.Name)
		}
		if s := c.evalEffects(fx); len(s) > 0 {
			d, h := c.flags(fx, map[string]bool{})
			out.Events = append(out.Events, EventReport{Schema: ev.Schema, Name: ev.Name, Table: c.first(s), Dynamic: d, Hidden: h})
		}
	}
	out.routineKeys, out.wildRoutines = sortedKeys(out.Routines)
	c.readRefusals(out)
	sort.Slice(out.Events, func(i, j int) bool {
		return key(out.Events[i].Schema, out.Events[i].Name) < key(out.Events[j].Schema, out.Events[j].Name)
	})
	sort.Strings(out.Dynamic)
	sort.Strings(out.Hidden)
	out.tableKeys, out.wildTables = sortedKeys(out.Tables)
	return out
}

func kindWord(r *Routine) string {
	if r.Function {
		return "function"
	}
	return "procedure"
}

// readRefusals marks the views whose reading calls a refused function,
// directly or through the views they read.
func (c *closer) readRefusals(out *Closure) {
	fn := map[string]string{}
	for changed := true; changed; {
		changed = false
		for k, fs := range c.vfuncs {
			if fn[k] != "" {
				continue
			}
			for _, r := range fs {
				if rf := out.Function(r.schema, r.name); rf != nil {
					fn[k] = rf.Schema + "." + rf.Name
				}
			}
			for _, r := range c.vpkgs[k] {
				if rf := out.Procedure(r.schema, r.name); rf != nil {
					fn[k] = rf.Schema + "." + rf.Name
				}
			}
			for _, b := range c.views[k] {
				if f := fn[b.key()]; f != "" && fn[k] == "" {
					fn[k] = f
				}
			}
			if fn[k] != "" {
				changed = true
			}
		}
	}
	for k, f := range fn {
		fe := out.Tables[k]
		if fe == nil {
			v := c.vnames[k]
			fe = &Fenced{Schema: v.Schema, Name: v.Name, Kind: KindView}
			out.Tables[k] = fe
		}
		fe.ReadRefuse = f
		fe.Why = append(fe.Why, "reading it calls the refused function "+f)
		sort.Strings(fe.Why)
	}
}

// why explains how object k reaches its targets, one line per path.
func (c *closer) why(k string, fs *[3]set) ([]string, Kind) {
	var lines []string
	var kind Kind
	for _, b := range c.views[k] {
		var ops Op
		var s set = set{}
		for op := 0; op < 3; op++ {
			if r := c.reachOf(b.key(), op); len(r) > 0 {
				ops |= opOf(op)
				s.addAll(r)
			}
		}
		if ops != 0 {
			what := "view"
			if c.merges[k] {
				kind |= KindMerge
				what = "MERGE table"
			} else {
				kind |= KindView
			}
			lines = append(lines, what+" over "+b.schema+"."+b.name+" -> "+c.list(s))
		}
	}
	for _, t := range c.trigs[k] {
		if s := c.evalEffects(t.fx); len(s) > 0 {
			kind |= KindTriggers
			lines = append(lines, t.t.Event.String()+" trigger "+t.t.Schema+"."+t.t.Name+" -> "+c.list(s))
		}
	}
	for _, fk := range c.fks[k] {
		s := set{}
		child := key(fk.Schema, fk.Table)
		s.addAll(c.protectedOf(child))
		if cs := c.cascade[child]; cs != nil {
			s.addAll(cs[1])
			s.addAll(cs[2])
		}
		if len(s) == 0 {
			continue
		}
		var rules []string
		if r := strings.ToUpper(fk.OnDelete); r == "CASCADE" || r == "SET NULL" || r == "SET DEFAULT" {
			rules = append(rules, "ON DELETE "+r)
		}
		if r := strings.ToUpper(fk.OnUpdate); r == "CASCADE" || r == "SET NULL" || r == "SET DEFAULT" {
			rules = append(rules, "ON UPDATE "+r)
		}
		if len(rules) == 0 {
			continue
		}
		kind |= KindCascade
		lines = append(lines, "foreign key "+fk.Schema+"."+fk.Name+" of "+fk.Schema+"."+fk.Table+" "+
			strings.Join(rules, " ")+" -> "+c.list(s))
	}
	sort.Strings(lines)
	return lines, kind
}

func (c *closer) list(s set) string {
	var parts []string
	for _, t := range c.targets(s) {
		parts = append(parts, t.Schema+"."+t.Table)
	}
	return strings.Join(parts, ", ")
}

// Lines renders the closure deterministically, one finding a line: for
// tests and for doctor.
func (c *Closure) Lines() []string {
	if c == nil {
		return nil
	}
	var out []string
	keys := make([]string, 0, len(c.Tables))
	for k := range c.Tables {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f := c.Tables[k]
		var ops []string
		for op := 0; op < 3; op++ {
			if len(f.Targets[op]) == 0 {
				continue
			}
			var ts []string
			for _, t := range f.Targets[op] {
				l := t.Lease
				if l == "" {
					l = "@"
				}
				ts = append(ts, t.Schema+"."+t.Table+"["+l+"]")
			}
			ops = append(ops, opOf(op).String()+": "+strings.Join(ts, " "))
		}
		if f.Refuse != 0 {
			ops = append(ops, "refuse "+f.Refuse.String())
		}
		if f.ReadRefuse != "" {
			ops = append(ops, "refuse reading (calls "+f.ReadRefuse+")")
		}
		if f.Engine != "" {
			out = append(out, "unfenceable table "+f.Schema+"."+f.Name+" (ENGINE="+f.Engine+"): every write refused")
			continue
		}
		out = append(out, "fence "+f.Schema+"."+f.Name+" ("+f.Kind.String()+") "+strings.Join(ops, "; "))
	}
	rkeys := make([]string, 0, len(c.Routines))
	for k := range c.Routines {
		rkeys = append(rkeys, k)
	}
	sort.Strings(rkeys)
	for _, k := range rkeys {
		r := c.Routines[k]
		line := "refuse " + kindWordOf(r.Function) + " " + r.Schema + "." + r.Name + " writes " + r.Table
		if r.Dynamic {
			line += " (dynamic SQL)"
		}
		if r.Hidden {
			line += " (body not visible)"
		}
		if r.Engine != "" {
			line += " (ENGINE=" + r.Engine + ")"
		}
		out = append(out, line)
	}
	for _, e := range c.Events {
		line := "unfenceable event " + e.Schema + "." + e.Name + " writes " + e.Table
		if e.Dynamic {
			line += " (dynamic SQL)"
		}
		out = append(out, line)
	}
	for _, d := range c.Dynamic {
		out = append(out, "dynamic SQL in "+d)
	}
	for _, h := range c.Hidden {
		out = append(out, "hidden body of "+h)
	}
	return out
}

func kindWordOf(function bool) string {
	if function {
		return "function"
	}
	return "procedure"
}
