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
