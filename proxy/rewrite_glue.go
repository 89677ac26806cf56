package proxy

import (
	"github.com/fenceproxy/fenceproxy/catalog"
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

// newRewriter builds the rewriter for a policy, with the schema catalog's
// closure (nil: none) and, when the catalog could not be read lately, why.
// limits.rewrite_cache: 0 means no cache at all (neither decisions nor
// statement shapes); rewrite's own zero means its default size, so 0 is
// passed on as "disabled".
func newRewriter(pol *policy.Policy, lim policy.Limits, cat *catalog.Closure, stale string) *rewrite.Engine {
	cache := lim.RewriteCache
	if cache == 0 {
		cache = -1
	}
	return rewrite.New(pol, rewrite.Options{CacheEntries: cache, Catalog: cat, CatalogStale: stale,
		MaxParseBytes: lim.MaxParseBytes, MaxParseTokens: lim.MaxParseTokens, MaxParseNesting: lim.MaxParseNesting})
}

func parseServerVersion(v string) rewrite.Server { return rewrite.ParseServerVersion(v) }

// statementDigest is the audit digest of a statement of the session: its
// literals as the session reads them never reach the record.
func statementDigest(sql string, srv rewrite.Server, sess *rewrite.Session) string {
	return rewrite.DigestFor(sql, srv, sess)
}
