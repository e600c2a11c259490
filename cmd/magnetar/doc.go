// Command magnetar is the single Magnetar binary: every server role and every tool is a
// subcommand. This package only parses flags and wires the library packages together; the
// behaviour lives in those packages, not here.
//
// # Subcommands
//
//	standalone                          standalone.go          embedded etcd, a bookie, the broker and admin REST in one process
//	etcd                                etcd.go                an embedded etcd member
//	bookie, bookie list                 bookie.go              a storage node (with an auto-recovery worker); live bookies
//	bookie decommission                 bookie_decommission.go drain a dead bookie's replicas elsewhere
//	broker                              broker.go              a broker serving Pulsar clients
//	autorecovery [status]               autorecovery.go        auditor and replication worker; their state
//	ledger create|write|read|show|...   ledger.go              ledger tools
//	admin tenants|namespaces|topics|... admin.go               the admin REST API's verbs (package adminclient)
//	produce, consume                    client.go              Pulsar client tools (package pulsarclient)
//	perf disk|ledger                    perf.go                benchmarks of the disk and of ledgers (package perf)
//	perf produce|consume|e2e            perf_pulsar.go         Pulsar benchmarks (package perf)
//
// docs/TOOLS.md describes the tools' flags and output; README.md lists the commands.
//
// # Adding a subcommand
//
// Each top-level subcommand lives in its own file, which defines a constructor returning a
// *cobra.Command and registers it from that file's init function:
//
//	func init() { register(newThingCmd) }
//
// register (commands.go) appends the constructor to a list that newRoot (root.go) turns into
// the root's subcommands, so adding a command never edits a shared list. Nested subcommands
// are added by their parent with AddCommand. Helpers every command shares — the
// --metadata-url flag and opening the store, -o text|json, logging setup, the HTTP server
// for metrics and pprof — are in common.go.
//
// # Exit codes
//
// run (root.go) returns the process's exit code: 0 on success; 2 for bad flags or arguments,
// with the error and the command's usage on stderr; 1 for any other failure, with the error
// on stderr. A RunE reports a usage problem by returning usageError{err}; cobra's own flag and
// argument errors count as usage too (the root's flag error function and isCobraUsage in
// commands.go). Everything else a command returns exits 1.
//
// # Goroutines
//
// A command runs on the main goroutine. The long-running roles (standalone, bookie, broker,
// autorecovery, etcd, bookie decommission, consume) run until SIGINT or SIGTERM cancels their
// context (signal.NotifyContext), then close what they started in reverse order and return.
// serveHTTP runs the HTTP server on its own goroutine and a second one that shuts it down
// when the context ends. The perf tools' load goroutines are package perf's, which waits for
// them before it returns its report. Every other goroutine belongs to the packages wired here.
package main
