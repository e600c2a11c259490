package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// subcommands lists every top-level subcommand. Each lives in its own file.
func subcommands() []*cobra.Command {
	return []*cobra.Command{}
}

// isCobraUsage recognises cobra's own argument errors (unknown command, wrong arg count).
func isCobraUsage(err error) bool {
	s := err.Error()
	return strings.HasPrefix(s, "unknown command") || strings.HasPrefix(s, "unknown flag") ||
		strings.Contains(s, "arg(s)") || strings.HasPrefix(s, "invalid argument") ||
		strings.HasPrefix(s, "required flag")
}
