// Package config reads Pulsar-style configuration files (broker.conf, standalone.conf,
// bookkeeper.conf, client.conf) and applies them to a command's flags, so an operator can
// bring the files they run Pulsar with.
//
// # Format
//
// A file is Java properties text, as Pulsar's PulsarConfigurationLoader reads it:
//
//	# comment            ! comment too
//	key=value            key: value            key value
//	long=first \
//	     continued       (a trailing backslash continues the line; leading blanks of the
//	                      next line are dropped)
//	escaped=a\=b\tc\u00e9
//
// Keys and values are trimmed. An empty value leaves the setting at its default, except where
// a key documents otherwise (the listener ports: empty turns the listener off, as Pulsar's
// brokerServicePortTls= does). A later line for the same key wins.
//
// # Applying a file
//
// Each command declares the Pulsar keys it has as a []Key, each naming the flag it sets and,
// where the forms differ, a Map from the file's value to the flag's. Apply sets every flag the
// command line did not set (flags override the file); a file may also use a command's own
// flag names (kebab-case) as keys, which is the form Print writes for settings Pulsar has no
// key for. Keys that are neither are returned once, sorted, for the caller to report as
// ignored. A value the flag does not accept is a *KeyError naming the key and its line.
//
// Print writes the effective configuration (every flag, under its Pulsar key where it has
// one) with the values of secret keys masked, in the same format, so its output can be fed
// back with --config.
//
// # Concurrency
//
// The package has no goroutines and no state; its functions are safe for concurrent use on
// distinct flag sets.
package config
