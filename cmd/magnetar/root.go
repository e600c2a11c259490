package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// usageError marks an error caused by bad flags or arguments: the command exits 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "magnetar",
		Short:         "Magnetar: Pulsar + BookKeeper architecture in one Go binary",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return usageError{err}
	})
	root.AddCommand(subcommands()...)
	return root
}

// run executes the command line and returns the process exit code: 0 ok, 2 usage, 1 failure.
func run(args []string) int {
	root := newRoot()
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) || isCobraUsage(err) {
		fmt.Fprintf(os.Stderr, "Error: %v\n", err)
		c, _, findErr := root.Find(args)
		if findErr != nil || c == nil {
			c = root
		}
		fmt.Fprint(os.Stderr, c.UsageString())
		return 2
	}
	fmt.Fprintf(os.Stderr, "Error: %v\n", err)
	return 1
}
