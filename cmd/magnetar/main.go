// Command magnetar is the single Magnetar binary: every role and tool is a subcommand.
package main

import (
	"os"
)

func main() {
	os.Exit(run(os.Args[1:]))
}
