// Command fenceproxy is a MySQL wire-protocol proxy that fences writes to
// protected tables with lease tokens. See README.md.
//
// This file builds the command tree and maps errors to exit codes; each
// subcommand lives in its own file and adds itself in subcommands.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
)

// Exit codes, the same for every command.
const (
	exitOK      = 0
	exitRefused = 1 // held (acquire), lost (renew, release), not found (show), a bad config (check-config, serve)
	exitUsage   = 2 // bad flags or arguments
	exitDB      = 3 // connection, SQL or schema error
)

// subcommands add themselves to the root command (one per file, in init).
var subcommands []func(stdout, stderr io.Writer) *cobra.Command

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// exitError is an error that carries its exit code. A command's RunE
// returns one for every failure it reports; any other error comes from
// cobra's own parsing and is a usage error.
type exitError struct {
	code int
	err  error
	// reported: the command has said it already (serve logs its fatal
	// error in the log's format); run prints nothing more.
	reported bool
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// reported marks err (an *exitError) as already told to the user.
func reported(err error) error {
	if ee, ok := err.(*exitError); ok {
		ee.reported = true
	}
	return err
}

func fail(code int, format string, a ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, a...)}
}

// usageErr is a usage error found by a command itself.
func usageErr(format string, a ...any) error { return fail(exitUsage, format, a...) }

// run executes one command line and returns the process's exit code. Help
// and version go to stdout with exit 0; errors go to stderr as one line,
// "fenceproxy <command>: <message>", with a hint for usage errors.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	code := exitUsage
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
		if ee.reported {
			return code
		}
	}
	fmt.Fprintf(stderr, "%s: %s\n", cmd.CommandPath(), termSafeLines(cleanMessage(err.Error())))
	if code == exitUsage {
		fmt.Fprintf(stderr, "run '%s --help' for usage\n", cmd.CommandPath())
	}
	return code
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "fenceproxy",
		Short: "MySQL proxy that fences writes to protected tables with lease tokens",
		Long: "fenceproxy sits between applications and MySQL/MariaDB and rewrites every write to the\n" +
			"tables it protects so that the database itself rejects writes of a worker whose lease\n" +
			"expired or was taken over. See README.md.",
		Version:       versionString(),
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	group(root)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetVersionTemplate("{{.Version}}")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr("%v", err) })
	for _, sub := range subcommands {
		root.AddCommand(sub(stdout, stderr))
	}
	shellCompletion(root)
	return root
}

// shellCompletion makes cobra's completion command refuse a shell it has
// no script for (cobra prints its help and exits 0), naming the ones it has.
func shellCompletion(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		var shells []string
		for _, sh := range c.Commands() {
			shells = append(shells, sh.Name())
		}
		c.Args = cobra.ArbitraryArgs
		c.RunE = func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return usageErr("no completion for shell %q: the shells are %s", args[0], strings.Join(shells, ", "))
		}
	}
}

// group makes cmd a command that only holds subcommands: without arguments
// it prints its help (stdout, exit 0); an unknown subcommand is a usage
// error with suggestions, never a silent help page.
func group(cmd *cobra.Command) *cobra.Command {
	cmd.Args = cobra.ArbitraryArgs
	cmd.SuggestionsMinimumDistance = 2
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		if len(args) == 0 {
			return cmd.Help()
		}
		hint := ""
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			hint = " (did you mean " + strings.Join(s, " or ") + "?)"
		}
		return usageErr("unknown command %q%s", args[0], hint)
	}
	return cmd
}

// exactArgs wraps a cobra argument check so that its error is a usage error with
// the command's own wording.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) != n {
			if n == 0 {
				return usageErr("unexpected argument %q", args[0])
			}
			return usageErr("want %s, got %s", what, plural(len(args), "argument", "arguments"))
		}
		return nil
	}
}

// cleanMessage drops the package prefixes that wrapping repeats
// ("lease: acquire \"x\": lease: invalid ...") and keeps one of each.
func cleanMessage(msg string) string {
	parts := strings.Split(msg, ": ")
	out := parts[:0]
	for _, p := range parts {
		if p == "lease" || p == "policy" || p == "fenceproxy" {
			continue
		}
		out = append(out, p)
	}
	return strings.Join(out, ": ")
}
