package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// registry holds the constructors of the top-level subcommands. Each subcommand lives in its
// own file and registers itself from an init function, so files never edit a shared list.
var registry []func() *cobra.Command

// register adds a top-level subcommand constructor.
func register(f func() *cobra.Command) { registry = append(registry, f) }

// subcommands builds every registered top-level subcommand.
func subcommands() []*cobra.Command {
	cmds := make([]*cobra.Command, 0, len(registry))
	for _, f := range registry {
		cmds = append(cmds, f())
	}
	return cmds
}

// isCobraUsage recognises cobra's own argument errors (unknown command, wrong arg count).
func isCobraUsage(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unknown command") || strings.HasPrefix(s, "unknown flag") ||
		strings.Contains(s, "arg(s)") || strings.HasPrefix(s, "invalid argument") ||
		strings.HasPrefix(s, "required flag")
}
