package proxy

import (
	"github.com/fenceproxy/fenceproxy/policy"
	"github.com/fenceproxy/fenceproxy/rewrite"
)

func newRewriter(pol *policy.Policy, cache int) Rewriter {
	return rewrite.New(pol, rewrite.Options{CacheEntries: cache})
}

func parseServerVersion(v string) rewrite.Server { return rewrite.ParseServerVersion(v) }

func statementDigest(sql string) string { return rewrite.Digest(sql) }
