package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version is set at build time: go build -ldflags "-X main.version=v1.2.3".
var version = "dev"

func init() {
	subcommands = append(subcommands, func(stdout, _ io.Writer) *cobra.Command {
		return &cobra.Command{
			Use:   "version",
			Short: "Print the version (also: fenceproxy --version)",
			Args:  exactArgs(0, ""),
			RunE: func(*cobra.Command, []string) error {
				fmt.Fprint(stdout, versionString())
				return nil
			},
		}
	})
}

// versionString is what `version` and `--version` print: the version, the
// Go toolchain and platform, and the VCS revision the binary was built from.
func versionString() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fenceproxy %s (%s %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" || s.Key == "vcs.modified" {
				fmt.Fprintf(&b, "  %s=%s\n", s.Key, s.Value)
			}
		}
	}
	return b.String()
}

// vcsRevision is the VCS commit the binary was built from, with "-dirty"
// when the tree had changes, or "unknown" (a build outside a checkout, or
// with -buildvcs=false).
func vcsRevision() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// plural is "1 thing" or "n things".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
